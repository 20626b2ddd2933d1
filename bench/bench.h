/* Benchmark framework for `kvcore bench SUITE [--json]`. Each suite lives in bench/bench_<suite>.c
 * and reports every case next to a baseline measured in the same run (memcpy bandwidth for
 * transfers, the scalar reference for the coder). Benchmarks are never run as tests. */
#ifndef KVC_BENCH_H
#define KVC_BENCH_H

#include <stddef.h>

#include <kvcore.h>

typedef struct bench_opts {
    int json;          /* one JSON object per line instead of a table */
    int threads;       /* 0: the context's default; suites may also sweep 1..threads */
    int quick;         /* smaller sizes / fewer repetitions (smoke runs) */
    kvc_context_t *ctx; /* context on the active backend (KVCORE_BACKEND selects it) */
    const char *only;  /* --case: report only cases whose name contains this (NULL: all) */
} bench_opts_t;

/* Whether case `name` is wanted (--case). bench_report drops unwanted cases; a suite may also skip
 * their work (the memory suite does). */
int bench_case_wanted(const bench_opts_t *o, const char *name);

/* One result line. JSON keys: suite, case, value, unit, baseline_name, baseline_value, ratio
 * (value / baseline_value), threads, then `params` (a JSON fragment of extra "key": value pairs,
 * without braces; may be NULL). */
typedef struct bench_result {
    const char *suite;
    const char *name;
    double value;
    const char *unit;
    const char *baseline_name;
    double baseline_value;
    int threads;
    const char *params;
} bench_result_t;

void bench_report(const bench_opts_t *o, const bench_result_t *r);

/* Monotonic seconds. */
double bench_now(void);

/* Best-of-`reps` seconds for fn(arg) after one warm-up call. */
double bench_time(void (*fn)(void *), void *arg, int reps);

/* memcpy bandwidth baseline (GB/s, counting each byte once) for `bytes` bytes with `threads`
 * threads, each copying its contiguous share, best of `reps`. */
double bench_memcpy_gbps(size_t bytes, int threads, int reps);

/* A page-aligned, first-touched buffer (aborts on failure); free with bench_free. */
void *bench_alloc(size_t bytes);
void bench_free(void *p, size_t bytes);

typedef struct bench_suite {
    const char *name;
    const char *summary;
    int (*run)(const bench_opts_t *o); /* 0 on success */
} bench_suite_t;

#endif
