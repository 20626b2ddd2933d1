/* SPDX-License-Identifier: BSD-3-Clause */
/* `kvcore bench rope`: RoPE key re-rotation throughput in GB/s of key bytes (each byte counted once,
 * though it is read and written), next to memcpy of the same number of bytes with the same threads,
 * timed alternately with the op (bench_pair).
 * Shape as LMCache's microbenchmark: 8 KV heads x 128, tokens 4096 (1024 with --quick), positions
 * old = t, new = t + 1000 (a CacheBlend shift: every token has its own pair of table rows). Runs on
 * the CPU backend with 1 thread, then with --threads N (default: the context's thread count). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

#include "bench.h"
#include "suites.h"

#define ROPE_STYLE(s) (&(const kvc_rope_params_t){ .field_mask = KVC_ROPE_PARAM_STYLE, .style = (s) })

#define NKV 8
#define HS 128
#define SHIFT 1000

typedef struct rope_job {
    kvc_context_t *ctx;
    kvc_rope_keys_t keys;
    const int64_t *old_pos, *new_pos;
    const kvc_rope_table_t *table; /* NULL: the delta variant */
    kvc_rope_style_t style;
    kvc_status_t status;
} rope_job_t;

static void run_job(void *arg)
{
    rope_job_t *j = arg;
    const kvc_rope_params_t *params = ROPE_STYLE(j->style);
    const kvc_status_t st = j->table ? kvc_rope_k_fused(j->ctx, NULL, &j->keys, j->old_pos, j->new_pos, j->table, params)
                                     : kvc_rope_k_delta(j->ctx, NULL, &j->keys, j->old_pos, j->new_pos, HS, 10000.0, params);
    if (st != KVC_OK) j->status = st;
}

typedef struct table_job {
    kvc_context_t *ctx;
    kvc_rope_table_t table;
    kvc_status_t status;
} table_job_t;

static void run_table_job(void *arg)
{
    table_job_t *j = arg;
    const kvc_status_t st = kvc_rope_cache_build(j->ctx, NULL, &j->table, 10000.0);
    if (st != KVC_OK) j->status = st;
}

static const char *dt_name(kvc_dtype_t d) { return d == KVC_DTYPE_F32 ? "f32" : d == KVC_DTYPE_F16 ? "f16" : "bf16"; }

static kvc_context_t *cpu_context(int threads)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu",
                               .num_threads = threads };
    kvc_context_t *ctx = NULL;
    if (kvc_context_create(&p, &ctx) != KVC_OK) {
        fprintf(stderr, "bench rope: cpu context: %s\n", kvc_last_error());
        return NULL;
    }
    return ctx;
}

typedef struct rope_case {
    kvc_dtype_t dtype, table_dtype;
    kvc_rope_style_t style;
    int delta;          /* table-free variant */
    int varying_delta;  /* a different shift per token: sincos for every token */
} rope_case_t;

static const rope_case_t cases[] = {
    { KVC_DTYPE_F16, KVC_DTYPE_F32, KVC_ROPE_NEOX, 0, 0 },
    { KVC_DTYPE_F16, KVC_DTYPE_F16, KVC_ROPE_NEOX, 0, 0 }, /* LMCache's CUDA kernel: table in the key dtype */
    { KVC_DTYPE_F16, KVC_DTYPE_F32, KVC_ROPE_GPTJ, 0, 0 },
    { KVC_DTYPE_BF16, KVC_DTYPE_F32, KVC_ROPE_NEOX, 0, 0 },
    { KVC_DTYPE_BF16, KVC_DTYPE_BF16, KVC_ROPE_NEOX, 0, 0 },
    { KVC_DTYPE_BF16, KVC_DTYPE_F32, KVC_ROPE_GPTJ, 0, 0 },
    { KVC_DTYPE_F32, KVC_DTYPE_F32, KVC_ROPE_NEOX, 0, 0 },
    { KVC_DTYPE_F16, KVC_DTYPE_F32, KVC_ROPE_NEOX, 1, 0 },
    { KVC_DTYPE_F16, KVC_DTYPE_F32, KVC_ROPE_GPTJ, 1, 0 },
    { KVC_DTYPE_BF16, KVC_DTYPE_F32, KVC_ROPE_NEOX, 1, 0 },
    { KVC_DTYPE_F16, KVC_DTYPE_F32, KVC_ROPE_NEOX, 1, 1 },
};

static int run_threads(const bench_opts_t *o, int threads, size_t tokens, int reps)
{
    const double min_seconds = o->quick ? 0 : 0.25;
    kvc_context_t *ctx = cpu_context(threads);
    if (!ctx) return 1;
    const size_t max_pos = tokens + SHIFT + 1;
    int64_t *old_pos = malloc(tokens * sizeof(int64_t)), *new_pos = malloc(tokens * sizeof(int64_t));
    int64_t *varied = malloc(tokens * sizeof(int64_t));
    if (!old_pos || !new_pos || !varied) {
        fprintf(stderr, "bench rope: out of memory\n");
        kvc_context_destroy(ctx);
        return 1;
    }
    for (size_t t = 0; t < tokens; t++) {
        old_pos[t] = (int64_t)t;
        new_pos[t] = (int64_t)(t + SHIFT);
        varied[t] = (int64_t)(t * 7 % max_pos);
    }
    int rc = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]) && !rc; c++) {
        const rope_case_t *rc_ = &cases[c];
        char name[96];
        if (rc_->delta)
            snprintf(name, sizeof(name), "delta %s %s%s", dt_name(rc_->dtype), rc_->style == KVC_ROPE_NEOX ? "neox" : "gptj",
                     rc_->varying_delta ? " varying-shift" : "");
        else
            snprintf(name, sizeof(name), "fused %s %s table-%s", dt_name(rc_->dtype),
                     rc_->style == KVC_ROPE_NEOX ? "neox" : "gptj", dt_name(rc_->table_dtype));
        if (!bench_case_wanted(o, name)) continue;
        const size_t es = kvc_dtype_size(rc_->dtype), bytes = tokens * NKV * HS * es;
        void *key = bench_alloc(bytes);
        /* small finite values in every dtype: 0x3c00 is 1.0 in f16, 0x3f80 in bf16, tiny in f32 */
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)key)[i] = rc_->dtype == KVC_DTYPE_BF16 ? 0x3f80 : 0x3c00;
        kvc_rope_table_t table = { .dtype = rc_->table_dtype, .max_position = max_pos, .rot_dim = HS };
        const size_t table_bytes = max_pos * HS * kvc_dtype_size(rc_->table_dtype);
        table.data = bench_alloc(table_bytes);
        rope_job_t job = { .ctx = ctx,
                           .keys = { .data = key, .dtype = rc_->dtype, .num_tokens = tokens, .num_heads = NKV, .head_size = HS },
                           .old_pos = old_pos,
                           .new_pos = rc_->varying_delta ? varied : new_pos,
                           .table = rc_->delta ? NULL : &table,
                           .style = rc_->style,
                           .status = kvc_rope_cache_build(ctx, NULL, &table, 10000.0) };
        bench_memcpy_job_t mj = { .dst = bench_alloc(bytes), .src = bench_alloc(bytes), .bytes = bytes, .threads = threads };
        bench_stat_t op, base;
        bench_pair(run_job, &job, bench_memcpy_run, &mj, reps, min_seconds, &op, &base);
        bench_free(mj.dst, bytes);
        bench_free((void *)mj.src, bytes);
        if (job.status != KVC_OK) {
            fprintf(stderr, "bench rope: %s: %s\n", kvc_status_string(job.status), kvc_last_error());
            rc = 1;
        } else {
            char params[256];
            snprintf(params, sizeof(params),
                     "\"dtype\":\"%s\",\"tokens\":%zu,\"heads\":%d,\"head_size\":%d,\"rot_dim\":%d,\"bytes\":%zu",
                     dt_name(rc_->dtype), tokens, NKV, HS, HS, bytes);
            bench_result_t r = { .suite = "rope", .name = name, .unit = "GB/s", .baseline_name = "memcpy",
                                 .threads = threads, .params = params };
            bench_set_rates(&r, (double)bytes / 1e9, &op, &base);
            bench_report(o, &r);
        }
        bench_free(key, bytes);
        bench_free(table.data, table_bytes);
    }
    if (!rc && bench_case_wanted(o, "cache_build f32")) { /* the table itself: max_pos rows of cos/sin, fp32 */
        table_job_t tj = { .ctx = ctx, .table = { .dtype = KVC_DTYPE_F32, .max_position = max_pos, .rot_dim = HS } };
        const size_t tb = max_pos * HS * 4;
        tj.table.data = bench_alloc(tb);
        bench_memcpy_job_t mj = { .dst = bench_alloc(tb), .src = bench_alloc(tb), .bytes = tb, .threads = threads };
        bench_stat_t op, base;
        bench_pair(run_table_job, &tj, bench_memcpy_run, &mj, reps, min_seconds, &op, &base);
        bench_free(mj.dst, tb);
        bench_free((void *)mj.src, tb);
        char params[160];
        snprintf(params, sizeof(params), "\"rows\":%zu,\"rot_dim\":%d,\"bytes\":%zu", max_pos, HS, tb);
        bench_result_t r = { .suite = "rope", .name = "cache_build f32", .unit = "GB/s", .baseline_name = "memcpy",
                             .threads = threads, .params = params };
        bench_set_rates(&r, (double)tb / 1e9, &op, &base);
        if (tj.status != KVC_OK) rc = 1;
        else bench_report(o, &r);
        bench_free(tj.table.data, tb);
    }
    free(old_pos);
    free(new_pos);
    free(varied);
    kvc_context_destroy(ctx);
    return rc;
}

int bench_rope(const bench_opts_t *o)
{
    const size_t tokens = o->quick ? 1024 : 4096;
    const int reps = o->quick ? 3 : 10;
    int rc = run_threads(o, 1, tokens, reps);
    if (!rc && o->threads > 1) rc = run_threads(o, o->threads, tokens, reps);
    return rc;
}
