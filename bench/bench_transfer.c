/* SPDX-License-Identifier: BSD-3-Clause */
/* `kvcore bench transfer`: KV transfers of one 256-token chunk (32 layers, 8 KV heads x 128, fp16,
 * block size 16, random block ids) per format family and direction, next to memcpy of the same
 * bytes between the same two buffers (chunk -> pool for H2D, pool -> chunk for D2H) with the same
 * thread count, timed alternately with the op (bench_pair). On a GPU backend the engine tensors
 * and the chunk are device memory (kvc_device_alloc), each timed call ends with a stream
 * synchronisation, and the baseline is a device-to-device copy of the same bytes (kvc_memcpy). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "suites.h"

enum { NL = 32, NH = 8, HS = 128, MLA_HS = 576, BS = 16, CHUNK = 256, NB = 32, ES = 2 };
/* Format 14: the DSA indexer's 132-byte rows (128 values + a 4-byte scale); format 17: DeepSeek's MLA
 * as a (latent 512, rope 64) tuple of fp16 planes. */
enum { DSA_ROW = 132, LATENT_BYTES = 512 * ES, ROPE_BYTES = 64 * ES };

/* Every format's pool fits one arena (64 MiB: NB blocks of every layer and plane); chunks fit 32 MiB. */
#define ARENA_BYTES ((size_t)NB * NL * 2 * BS * NH * HS * ES)
#define CHUNK_BYTES ((size_t)2 * NL * CHUNK * NH * HS * ES)

typedef struct {
    int blocks; /* 1: kvc_transfer_blocks, 0: kvc_transfer_tokens */
    int format;
} tcase_t;

/* Every format in both ops; the head-major (HND) ones next to their NHD counterparts. */
static const tcase_t cases[] = {
    { 1, 1 }, { 1, 6 }, { 1, 2 }, { 1, 7 }, { 1, 0 }, { 1, 8 }, { 1, 9 }, { 1, 4 }, { 1, 3 }, { 1, 5 },
    { 1, 11 }, { 1, 10 }, { 1, 13 }, { 1, 12 }, { 1, 16 }, { 1, 15 }, { 1, 14 }, { 1, 17 },
    { 0, 1 }, { 0, 6 }, { 0, 2 }, { 0, 7 }, { 0, 0 }, { 0, 8 }, { 0, 9 }, { 0, 4 }, { 0, 3 }, { 0, 5 },
    { 0, 11 }, { 0, 10 }, { 0, 13 }, { 0, 12 }, { 0, 16 }, { 0, 15 }, { 0, 14 }, { 0, 17 },
};

typedef struct {
    kvc_context_t *ctx;
    kvc_token_transfer_t tok;
    kvc_block_transfer_t blk;
    int blocks, failed;
} job_t;

static void run_job(void *arg)
{
    job_t *j = arg;
    kvc_status_t st = j->blocks ? kvc_transfer_blocks(j->ctx, &j->blk) : kvc_transfer_tokens(j->ctx, &j->tok);
    if (st == KVC_OK) st = kvc_stream_synchronize(j->ctx, NULL); /* GPU ops are asynchronous */
    if (st != KVC_OK) j->failed = 1;
}

/* GPU backend: buffers in device memory, the baseline a device-to-device copy. */
static int on_gpu(const bench_opts_t *o) { return strcmp(kvc_context_backend_name(o->ctx), "cpu") != 0; }

static void *buf_alloc(const bench_opts_t *o, size_t bytes)
{
    if (!on_gpu(o)) return bench_alloc(bytes);
    void *p = NULL;
    if (kvc_device_alloc(o->ctx, bytes, &p) != KVC_OK) {
        fprintf(stderr, "bench transfer: device_alloc(%zu): %s\n", bytes, kvc_last_error());
        exit(1);
    }
    return p;
}

static void buf_free(const bench_opts_t *o, void *p, size_t bytes)
{
    if (on_gpu(o)) (void)kvc_device_free(o->ctx, p);
    else bench_free(p, bytes);
}

typedef struct {
    kvc_context_t *ctx;
    void *dst, *src;
    size_t bytes;
} d2d_job_t;

static void d2d_job(void *arg)
{
    d2d_job_t *j = arg;
    (void)kvc_memcpy(j->ctx, j->dst, j->src, j->bytes);
}

static kvc_page_shape_t shape_of(int fmt)
{
    const int mla = kvc_format_is_mla(fmt), fused = kvc_format_is_fused_packed(fmt);
    kvc_page_shape_t s = { .kv_size = mla || fused ? 1 : 2, .element_size = ES, .nl = NL, .nb = NB, .bs = BS,
                           .nh = mla ? 1 : NH, .hs = mla ? MLA_HS : fused ? 2 * HS : HS };
    if (fmt == KVC_FMT_NL_X_NB_BSV_BSS) s.hs = DSA_ROW / ES;
    if (fmt == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) {
        s.num_planes = 2;
        s.plane_bytes[0] = LATENT_BYTES;
        s.plane_bytes[1] = ROPE_BYTES;
    }
    return s;
}

/* Bytes of one engine tensor of the format (the pointer table has kvc_shape_ptr_count of them;
 * format 17's planes are smaller than this, which is the whole row). */
static size_t tensor_bytes(int fmt, const kvc_page_shape_t *s)
{
    const size_t block = (size_t)(s->bs * s->nh * s->hs * s->element_size);
    if (kvc_format_is_cross_layer(fmt)) return block * 2 * NL * NB;
    const int one = kvc_format_is_kv_list(fmt) || fmt == KVC_FMT_NL_X_TWO_X_NB_BS_NH_HS;
    return block * (one ? 1 : (size_t)s->kv_size) * NB;
}

typedef struct {
    char *arena, *chunk;
    kvc_context_t *ctxs[2];
    int threads[2];
    int nctx, gpu; /* GPU backend: one context (o->ctx), device buffers, device-to-device baseline */
} suite_t;

static int run_case(const bench_opts_t *o, suite_t *su, const tcase_t *c)
{
    const kvc_page_shape_t s = shape_of(c->format);
    const int64_t nptr = kvc_shape_ptr_count(c->format, &s);
    const size_t tb = tensor_bytes(c->format, &s);
    void *eng[2 * NL];
    if ((size_t)nptr * tb > ARENA_BYTES) {
        fprintf(stderr, "bench transfer: format %d needs %zu bytes of pool\n", c->format, (size_t)nptr * tb);
        return 1;
    }
    for (int64_t i = 0; i < nptr; i++) eng[i] = su->arena + (size_t)i * tb;
    const size_t row = (size_t)(s.nh * s.hs * ES), chunk_bytes = (size_t)s.kv_size * NL * CHUNK * row;
    void *chunk = su->chunk;
    int64_t ids[CHUNK / BS], slots[CHUNK];
    srand(12345 + c->format);
    for (int i = 0; i < CHUNK / BS; i++) { /* distinct random blocks */
        int dup;
        do {
            ids[i] = rand() % NB;
            dup = 0;
            for (int k = 0; k < i; k++) dup |= ids[k] == ids[i];
        } while (dup);
    }
    for (int t = 0; t < CHUNK; t++) slots[t] = ids[t / BS] * BS + t % BS; /* vLLM-style slot mapping */
    const int reps = o->quick ? 3 : 10;
    for (int dir = 0; dir < 2; dir++)
        for (int ti = 0; ti < su->nctx; ti++) {
            job_t j = { .ctx = su->ctxs[ti], .blocks = c->blocks };
            j.tok = (kvc_token_transfer_t){ .format = c->format, .direction = dir, .shape = s, .engine_ptrs = eng,
                                            .num_engine_ptrs = nptr, .chunk = chunk, .num_tokens = CHUNK,
                                            .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = CHUNK };
            j.blk = (kvc_block_transfer_t){ .format = c->format, .direction = dir, .shape = s, .engine_ptrs = eng,
                                            .num_engine_ptrs = nptr, .objects = &chunk, .num_objects = 1,
                                            .chunk_tokens = CHUNK, .block_ids = ids,
                                            .block_id_type = KVC_INDEX_INT64, .num_block_ids = CHUNK / BS };
            char name[96], params[448];
            snprintf(name, sizeof(name), "%s/%s/%s", c->blocks ? "blocks" : "tokens", kvc_format_name(c->format),
                     dir == KVC_H2D ? "H2D" : "D2H");
            if (!bench_case_wanted(o, name)) continue;
            /* The baseline copies the same bytes between the same buffers, in the op's direction. */
            char *pool = su->arena;
            bench_memcpy_job_t mj = { .dst = dir == KVC_H2D ? pool : chunk, .src = dir == KVC_H2D ? chunk : pool,
                                      .bytes = chunk_bytes, .threads = su->threads[ti] };
            d2d_job_t dj = { o->ctx, mj.dst, (void *)mj.src, chunk_bytes };
            bench_stat_t op, base;
            bench_pair(run_job, &j, su->gpu ? d2d_job : bench_memcpy_run, su->gpu ? (void *)&dj : (void *)&mj, reps,
                       o->quick ? 0 : 0.25, &op, &base);
            if (j.failed) {
                fprintf(stderr, "bench transfer: format %d failed: %s\n", c->format, kvc_last_error());
                return 1;
            }
            /* streaming: whether the CPU engine wrote this case with streaming stores; *_huge_bytes:
             * how much of each buffer transparent huge pages back (page placement differs by machine). */
            const int streaming = !su->gpu && (int64_t)chunk_bytes > kvc_context_stream_min_bytes(su->ctxs[ti]);
            snprintf(params, sizeof(params),
                     "\"op\":\"%s\",\"format\":%d,\"direction\":\"%s\",\"layout\":\"%s\",\"nl\":%d,\"nh\":%d,"
                     "\"hs\":%d,\"bs\":%d,\"chunk_tokens\":%d,\"element_size\":%d,\"bytes\":%zu,\"streaming\":%s,"
                     "\"pool_huge_bytes\":%" PRId64 ",\"chunk_huge_bytes\":%" PRId64,
                     c->blocks ? "blocks" : "tokens", c->format, dir == KVC_H2D ? "H2D" : "D2H",
                     kvc_format_is_hnd(c->format) ? "HND" : "NHD", NL, (int)s.nh, (int)s.hs, BS, CHUNK, ES,
                     chunk_bytes, streaming ? "true" : "false", su->gpu ? -1 : bench_huge_bytes(su->arena),
                     su->gpu ? -1 : bench_huge_bytes(chunk));
            bench_result_t r = { .suite = "transfer", .name = name, .unit = "GB/s",
                                 .baseline_name = su->gpu ? "memcpy_d2d" : "memcpy", .threads = su->threads[ti],
                                 .params = params };
            bench_set_rates(&r, (double)chunk_bytes / 1e9, &op, &base);
            bench_report(o, &r);
        }
    return 0;
}

int bench_transfer_run(const bench_opts_t *o)
{
    /* 1 thread, then the requested count (2 on the reference machine). On a GPU backend one context:
     * threads do not apply. */
    suite_t su = { .threads = { 1, o->threads > 1 ? o->threads : 2 }, .nctx = 2, .gpu = on_gpu(o) };
    if (su.gpu) {
        su.nctx = 1;
        su.ctxs[0] = o->ctx;
        su.threads[0] = 1;
    }
    for (int i = 0; i < 2 && !su.gpu; i++) {
        kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = su.threads[i] };
        if (kvc_context_create(&p, &su.ctxs[i]) != KVC_OK) {
            fprintf(stderr, "bench transfer: %s\n", kvc_last_error());
            if (i) kvc_context_destroy(su.ctxs[0]);
            return 1;
        }
    }
    su.arena = buf_alloc(o, ARENA_BYTES);
    su.chunk = buf_alloc(o, CHUNK_BYTES);
    int rc = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && !rc; i++) rc = run_case(o, &su, &cases[i]);
    buf_free(o, su.arena, ARENA_BYTES);
    buf_free(o, su.chunk, CHUNK_BYTES);
    for (int i = 0; i < 2 && !su.gpu; i++) kvc_context_destroy(su.ctxs[i]);
    return rc;
}
