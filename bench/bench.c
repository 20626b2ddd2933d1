/* Benchmark helpers: timing, memcpy baseline, reporting. */
#define _GNU_SOURCE
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_time(void (*fn)(void *), void *arg, int reps)
{
    fn(arg);
    double best = 1e30;
    for (int i = 0; i < (reps > 0 ? reps : 1); i++) {
        double t0 = bench_now();
        fn(arg);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

void *bench_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "bench: cannot map %zu bytes\n", bytes);
        exit(1);
    }
    memset(p, 0x5a, bytes);
    return p;
}

void bench_free(void *p, size_t bytes) { munmap(p, bytes ? bytes : 1); }

typedef struct {
    char *dst;
    const char *src;
    size_t bytes;
    int threads;
} memcpy_job_t;

static void memcpy_job(void *arg)
{
    memcpy_job_t *j = arg;
#ifdef _OPENMP
#pragma omp parallel num_threads(j->threads)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
#else
    {
        const int t = 0, n = 1;
#endif
        const size_t share = (j->bytes / (size_t)n + 63) & ~(size_t)63;
        const size_t off = share * (size_t)t;
        if (off < j->bytes) memcpy(j->dst + off, j->src + off, off + share > j->bytes ? j->bytes - off : share);
    }
}

double bench_memcpy_gbps(size_t bytes, int threads, int reps)
{
    memcpy_job_t j = { bench_alloc(bytes), bench_alloc(bytes), bytes, threads > 0 ? threads : 1 };
    double t = bench_time(memcpy_job, &j, reps);
    bench_free(j.dst, bytes);
    bench_free((void *)j.src, bytes);
    return (double)bytes / t / 1e9;
}

int bench_case_wanted(const bench_opts_t *o, const char *name) { return !o->only || strstr(name, o->only); }

void bench_report(const bench_opts_t *o, const bench_result_t *r)
{
    if (!bench_case_wanted(o, r->name)) return;
    const double ratio = r->baseline_value > 0 ? r->value / r->baseline_value : 0.0;
    if (o->json) {
        printf("{\"suite\":\"%s\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"baseline_name\":\"%s\","
               "\"baseline_value\":%.6g,\"ratio\":%.4f,\"threads\":%d%s%s}\n",
               r->suite, r->name, r->value, r->unit, r->baseline_name ? r->baseline_name : "", r->baseline_value, ratio,
               r->threads, r->params && *r->params ? "," : "", r->params ? r->params : "");
    } else {
        printf("%-10s %-44s %10.3f %-7s vs %-18s %10.3f  ratio %6.3f  (%d thr)\n", r->suite, r->name, r->value, r->unit,
               r->baseline_name ? r->baseline_name : "-", r->baseline_value, ratio, r->threads);
    }
    fflush(stdout);
}
