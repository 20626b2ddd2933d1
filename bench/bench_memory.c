/* SPDX-License-Identifier: BSD-3-Clause */
/* `kvcore bench memory`: allocation + first touch of a pool for each kind of host memory (the free
 * is not timed), next to malloc + memset of the same bytes; batched memcpy and the split copy next
 * to one memcpy of the same bytes over the same threads; on a machine with two or more NUMA nodes,
 * one thread's reads from its own node and from another (remote next to local). Op and baseline
 * are timed alternately. */
#define _GNU_SOURCE /* sched_getcpu, CPU_SET */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* Seconds of `setup` alone; `teardown` runs untimed after it. -1 when setup fails. */
static double time_setup(void *(*setup)(void *), void (*teardown)(void *, void *), void *arg)
{
    const double t0 = bench_now();
    void *p = setup(arg);
    const double t = bench_now() - t0;
    if (!p) return -1;
    teardown(arg, p);
    return t;
}

static void *malloc_memset(void *arg)
{
    const size_t bytes = *(const size_t *)arg;
    char *p = malloc(bytes);
    if (p) memset(p, 0x5a, bytes); /* not 0: the compiler would turn malloc + memset(0) into calloc */
    __asm__ volatile("" : : "r"(p) : "memory"); /* and must not drop the unused writes either */
    return p;
}

static void free_malloced(void *arg, void *p)
{
    (void)arg;
    free(p);
}

typedef struct {
    kvc_context_t *ctx;
    size_t bytes;
    kvc_mem_params_t params;
} kvc_job_t;

static void *kvc_alloc(void *arg)
{
    kvc_job_t *j = arg;
    void *p = NULL;
    return kvc_mem_alloc(j->ctx, j->bytes, &j->params, &p, NULL) == KVC_OK ? p : NULL;
}

static void kvc_free(void *arg, void *p) { kvc_mem_free(((kvc_job_t *)arg)->ctx, p); }

static void report_kind(const bench_opts_t *o, const char *name, size_t bytes, unsigned kind, int reps)
{
    if (!bench_case_wanted(o, name)) return;
    char shm[64];
    snprintf(shm, sizeof(shm), "/kvcore-bench-%d", (int)getpid());
    kvc_job_t j = { .ctx = o->ctx, .bytes = bytes, .params = { .field_mask = KVC_MEM_PARAM_KIND, .kind = kind } };
    if (kind & KVC_MEM_SHARED) {
        j.params.field_mask |= KVC_MEM_PARAM_NAME;
        j.params.name = shm;
    }
    /* What this kind obtains here (page size, pinned, node), for the record. */
    void *p;
    kvc_mem_report_t r;
    kvc_status_t st = kvc_mem_alloc(o->ctx, bytes, &j.params, &p, &r);
    if (st != KVC_OK) {
        fprintf(stderr, "bench memory: %s skipped: %s (%s)\n", name, kvc_status_name(st), kvc_last_error());
        return;
    }
    kvc_mem_free(o->ctx, p);
    /* The kind and malloc + memset alternately (the first pair warms up); best of each. */
    double t = 1e30, base = 1e30;
    size_t base_bytes = bytes;
    for (int i = 0; i <= reps; i++) {
        const double tk = time_setup(kvc_alloc, kvc_free, &j), tb = time_setup(malloc_memset, free_malloced, &base_bytes);
        if (tk < 0 || tb < 0) {
            fprintf(stderr, "bench memory: %s failed: %s\n", name, tk < 0 ? kvc_last_error() : "malloc");
            return;
        }
        if (i > 0 && tk < t) t = tk;
        if (i > 0 && tb < base) base = tb;
    }
    char params[256];
    snprintf(params, sizeof(params),
             "\"bytes\":%zu,\"page_size\":%zu,\"pinned\":%d,\"numa_bound\":%d,\"fallbacks\":%" PRIu32, bytes,
             r.page_size, r.pinned, r.numa_bound, r.fallbacks);
    const bench_result_t res = { .suite = "memory",
                                 .name = name,
                                 .value = (double)bytes / t / 1e9,
                                 .unit = "GB/s",
                                 .baseline_name = "malloc+memset",
                                 .baseline_value = (double)bytes / base / 1e9,
                                 .threads = kvc_context_num_threads(o->ctx),
                                 .params = params };
    bench_report(o, &res);
}

typedef struct {
    kvc_context_t *ctx;
    void **dsts;
    const void **srcs;
    size_t *sizes;
    size_t count;
    kvc_status_t status;
} batch_job_t;

static void batch(void *arg)
{
    batch_job_t *j = arg;
    if (j->status == KVC_OK)
        j->status = kvc_batched_memcpy(j->ctx, j->dsts, (const void *const *)j->srcs, j->sizes, j->count, NULL);
}

typedef struct {
    kvc_context_t *ctx;
    void *dst;
    const void *src;
    size_t bytes, alignment;
    kvc_status_t status;
} split_job_t;

static void split(void *arg)
{
    split_job_t *j = arg;
    if (j->status == KVC_OK)
        j->status = kvc_memcpy_async(j->ctx, j->dst, j->src, j->bytes, KVC_H2D, 0, j->alignment, NULL);
}

static void report_copy(const bench_opts_t *o, const char *name, size_t bytes, const bench_stat_t *op,
                        const bench_stat_t *base, const char *params)
{
    bench_result_t res = { .suite = "memory",
                           .name = name,
                           .unit = "GB/s",
                           .baseline_name = "memcpy_same_bytes",
                           .threads = kvc_context_num_threads(o->ctx),
                           .params = params };
    bench_set_rates(&res, (double)bytes / 1e9, op, base);
    bench_report(o, &res);
}

static int bench_copies(const bench_opts_t *o, size_t bytes, int reps)
{
    const int threads = kvc_context_num_threads(o->ctx);
    static const char *const names[] = { "batched_memcpy_4KiB_entries", "batched_memcpy_64KiB_entries",
                                         "batched_memcpy_2048KiB_entries", "split_copy_align_65536KiB",
                                         "split_copy_align_4KiB" };
    int wanted = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) wanted |= bench_case_wanted(o, names[i]);
    if (!wanted) return 0;
    char *src = bench_alloc(bytes), *dst = bench_alloc(bytes);
    bench_memcpy_job_t mj = { .dst = dst, .src = src, .bytes = bytes, .threads = threads };
    bench_stat_t op, base;
    /* Entries of a KV page (4 KiB), a block (64 KiB) and a chunk (2 MiB), destinations shuffled. */
    const size_t entry_sizes[] = { 4 << 10, 64 << 10, 2 << 20 };
    int rc = 0;
    for (size_t c = 0; c < 3 && !rc; c++) {
        const size_t e = entry_sizes[c], n = bytes / e;
        batch_job_t j = { .ctx = o->ctx, .count = n };
        j.dsts = malloc(n * sizeof(*j.dsts));
        j.srcs = malloc(n * sizeof(*j.srcs));
        j.sizes = malloc(n * sizeof(*j.sizes));
        if (!j.dsts || !j.srcs || !j.sizes) {
            fprintf(stderr, "bench memory: out of memory for %zu entries\n", n);
            exit(1);
        }
        const size_t stride = n > 1 && n % 7919 ? 7919 : 1; /* a permutation when n is not a multiple of it */
        for (size_t i = 0; i < n; i++) {
            j.srcs[i] = src + i * e;
            j.dsts[i] = dst + (i * stride % n) * e;
            j.sizes[i] = e;
        }
        bench_pair(batch, &j, bench_memcpy_run, &mj, reps, 0, &op, &base);
        if (j.status != KVC_OK) {
            fprintf(stderr, "bench memory: batched memcpy failed: %s\n", kvc_last_error());
            rc = 1;
        } else {
            char name[64], params[96];
            snprintf(name, sizeof(name), "batched_memcpy_%zuKiB_entries", e >> 10);
            snprintf(params, sizeof(params), "\"bytes\":%zu,\"entries\":%zu", bytes, n);
            report_copy(o, name, bytes, &op, &base, params);
        }
        free(j.dsts);
        free(j.srcs);
        free(j.sizes);
    }
    /* The split copy with LMCache's 64 MiB registration pieces and a small alignment. */
    const size_t alignments[] = { (size_t)64 << 20, 4096 };
    for (size_t c = 0; c < 2 && !rc; c++) {
        split_job_t j = { .ctx = o->ctx, .dst = dst, .src = src, .bytes = bytes, .alignment = alignments[c] };
        bench_pair(split, &j, bench_memcpy_run, &mj, reps, 0, &op, &base);
        if (j.status != KVC_OK) {
            fprintf(stderr, "bench memory: split copy failed: %s\n", kvc_last_error());
            rc = 1;
            break;
        }
        char name[64], params[96];
        snprintf(name, sizeof(name), "split_copy_align_%zuKiB", alignments[c] >> 10);
        snprintf(params, sizeof(params), "\"bytes\":%zu,\"alignment\":%zu", bytes, alignments[c]);
        report_copy(o, name, bytes, &op, &base, params);
    }
    bench_free(src, bytes);
    bench_free(dst, bytes);
    return rc;
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} read_job_t;

static void read_copy(void *arg)
{
    read_job_t *j = arg;
    memcpy(j->dst, j->src, j->bytes);
}

/* One thread, held on the CPU it runs on, copies from memory bound to its own node (local) and to
 * another node (remote) into a buffer it touched itself. Needs two NUMA nodes on the live machine. */
static void bench_numa_reads(const bench_opts_t *o, size_t bytes, int reps)
{
    kvc_numa_node_info_t other = { 0 };
    if (!bench_case_wanted(o, "read_numa_local") && !bench_case_wanted(o, "read_numa_remote")) return;
    if (kvc_topology_is_synthetic(o->ctx) || kvc_topology_numa_count(o->ctx) < 2) {
        fprintf(stderr, "bench memory: read_numa_local/remote skipped: %s\n",
                kvc_topology_is_synthetic(o->ctx) ? "topology from XML" : "one NUMA node");
        return;
    }
#ifdef __linux__
    cpu_set_t saved, here;
    const int cpu = sched_getcpu();
    const int pinned = cpu >= 0 && sched_getaffinity(0, sizeof(saved), &saved) == 0;
    if (pinned) {
        CPU_ZERO(&here);
        CPU_SET(cpu, &here);
        sched_setaffinity(0, sizeof(here), &here);
    }
#endif
    kvc_mem_params_t p = { .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_TARGET | KVC_MEM_PARAM_POLICY,
                           .kind = KVC_MEM_NUMA,
                           .target = KVC_MEM_TARGET_LOCAL,
                           .policy = KVC_MEM_POLICY_STRICT };
    void *local = NULL, *remote = NULL;
    kvc_mem_report_t rl, rr;
    kvc_status_t st = kvc_mem_alloc(o->ctx, bytes, &p, &local, &rl);
    for (int i = 0; st == KVC_OK && i < kvc_topology_numa_count(o->ctx); i++) {
        kvc_numa_node_info_t n;
        if (kvc_topology_numa_node(o->ctx, i, &n) == KVC_OK && (int)n.os_index != rl.numa_bound) {
            other = n;
            break;
        }
    }
    if (st == KVC_OK) {
        p.target = KVC_MEM_TARGET_NODE;
        p.node = other.os_index;
        st = kvc_mem_alloc(o->ctx, bytes, &p, &remote, &rr);
    }
    char *dst = bench_alloc(bytes);
    if (st != KVC_OK) {
        fprintf(stderr, "bench memory: read_numa_local/remote skipped: %s (%s)\n", kvc_status_name(st), kvc_last_error());
    } else {
        read_job_t jl = { dst, local, bytes }, jr = { dst, remote, bytes };
        bench_stat_t sr, sl;
        bench_pair(read_copy, &jr, read_copy, &jl, reps, 0, &sr, &sl);
        const double gl = (double)bytes / sl.best / 1e9;
        char params[160];
        snprintf(params, sizeof(params), "\"bytes\":%zu,\"cpu_node\":%d,\"memory_node\":%d", bytes, rl.numa_bound,
                 rl.numa_bound);
        const bench_result_t res_l = { .suite = "memory", .name = "read_numa_local", .value = gl, .unit = "GB/s",
                                       .baseline_name = "read_numa_local", .baseline_value = gl, .threads = 1,
                                       .params = params };
        bench_report(o, &res_l);
        snprintf(params, sizeof(params), "\"bytes\":%zu,\"cpu_node\":%d,\"memory_node\":%d", bytes, rl.numa_bound,
                 rr.numa_bound);
        bench_result_t res_r = { .suite = "memory", .name = "read_numa_remote", .unit = "GB/s",
                                 .baseline_name = "read_numa_local", .threads = 1, .params = params };
        bench_set_rates(&res_r, (double)bytes / 1e9, &sr, &sl);
        bench_report(o, &res_r);
    }
    bench_free(dst, bytes);
    kvc_mem_free(o->ctx, local);
    kvc_mem_free(o->ctx, remote);
#ifdef __linux__
    if (pinned) sched_setaffinity(0, sizeof(saved), &saved);
#endif
}

int bench_memory_run(const bench_opts_t *o)
{
    const size_t pool = o->quick ? (size_t)256 << 20 : (size_t)4 << 30;
    const int reps = o->quick ? 2 : 3;
    bench_numa_reads(o, o->quick ? (size_t)64 << 20 : (size_t)1 << 30, reps);
    static const struct {
        const char *name;
        unsigned kind;
    } kinds[] = {
        { "alloc_touch_plain", KVC_MEM_PLAIN },
        { "alloc_touch_numa_local", KVC_MEM_NUMA },
        { "alloc_touch_hugepage", KVC_MEM_HUGEPAGE },
        { "alloc_touch_pinned", KVC_MEM_PINNED },
        { "alloc_touch_pinned_numa_hugepage", KVC_MEM_PINNED | KVC_MEM_NUMA | KVC_MEM_HUGEPAGE },
        { "alloc_touch_shared", KVC_MEM_SHARED },
        { "alloc_touch_shared_numa", KVC_MEM_SHARED | KVC_MEM_NUMA },
    };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        report_kind(o, kinds[k].name, pool, kinds[k].kind, reps);
    return bench_copies(o, o->quick ? (size_t)64 << 20 : (size_t)1 << 30, reps);
}
