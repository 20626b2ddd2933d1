/* SPDX-License-Identifier: BSD-3-Clause */
/* Benchmark framework for `kvcore bench SUITE [--json]`. Each suite lives in bench/bench_<suite>.c
 * and reports every case next to a baseline measured in the same run, interleaved with the op
 * (op, baseline, op, baseline, ...), so that a disturbance of a shared machine hits both sides
 * alike: memcpy bandwidth for transfers, the scalar reference for the coder. Benchmarks are never
 * run as tests. */
#ifndef KVC_BENCH_H
#define KVC_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore.h>

typedef struct bench_opts {
    int json;          /* one JSON object per line instead of a table */
    int threads;       /* 0: the context's default; suites may also sweep 1..threads */
    int quick;         /* smaller sizes / fewer repetitions (smoke runs) */
    kvc_context_t *ctx; /* context on the active backend (KVCORE_BACKEND selects it) */
    const char *cpu;   /* CPU model name (/proc/cpuinfo), reported on every line */
    const char *only;  /* --case: report only cases whose name contains this (NULL: all) */
    int progress;      /* a line on stderr between cases (kvcore bench: on a terminal, or --progress) */
    int quiet;         /* no per-suite summary */
} bench_opts_t;

/* Whether case `name` is wanted (--case). bench_report drops unwanted cases; a suite may also skip
 * their work (transfer, rope and memory do). */
int bench_case_wanted(const bench_opts_t *o, const char *name);

/* Timings of one side of bench_pair, in seconds. */
typedef struct bench_stat {
    double best, median, worst;
    int samples;
} bench_stat_t;

/* One result line. JSON keys: suite, case, value, unit, baseline_name, baseline_value, ratio
 * (value / baseline_value), threads, cpu, isa, load1 (the 1-minute load average when the line was
 * written), then, when `samples` > 0, value_median, baseline_median, ratio_median, samples; the
 * machine's conditions: llc_bytes, llc_source and stream_min_bytes (kvc_llc_info,
 * kvc_context_stream_min_bytes), thp (the kernel's THP mode), cpu_mhz (cpu0 now), and when
 * `samples` > 0 baseline_worst and baseline_spread (1 - baseline median / best: how much the
 * baseline itself varied); then `params` (a JSON fragment of extra "key": value pairs, without braces; may be NULL). value and
 * baseline_value are the best of the samples. */
typedef struct bench_result {
    const char *suite;
    const char *name;
    double value;
    const char *unit;
    const char *baseline_name;
    double baseline_value;
    int threads;
    const char *params;
    double value_median, baseline_median;
    double baseline_worst; /* the baseline's slowest sample as a rate (set by bench_set_rates) */
    int samples;
} bench_result_t;

void bench_report(const bench_opts_t *o, const bench_result_t *r);
/* Around one suite's run: the text table's header comes with its first case; the end prints a
 * one-line summary (cases, seconds, the range and geometric mean of the ratios) unless quiet or
 * JSON, and clears the progress line. */
void bench_suite_begin(const bench_opts_t *o, const char *suite);
void bench_suite_end(const bench_opts_t *o);

/* Rates `amount / seconds` of a pair measured by bench_pair into r (best and median of each side). */
void bench_set_rates(bench_result_t *r, double amount, const bench_stat_t *op, const bench_stat_t *base);

/* Monotonic seconds. */
double bench_now(void);

/* One warm-up call of each, then op and baseline alternately: at least `reps` pairs, and more
 * (up to 10 * reps) until `min_seconds` have passed. Best, median and worst seconds of each. */
void bench_pair(void (*op)(void *), void *op_arg, void (*base)(void *), void *base_arg, int reps, double min_seconds,
                bench_stat_t *op_s, bench_stat_t *base_s);

/* The baseline of most suites: memcpy of `bytes` with `threads` threads, each copying its
 * contiguous share. A job for bench_pair. */
typedef struct bench_memcpy_job {
    void *dst;
    const void *src;
    size_t bytes;
    int threads;
} bench_memcpy_job_t;
void bench_memcpy_run(void *job);

/* A page-aligned, first-touched buffer (aborts on failure); free with bench_free. */
void *bench_alloc(size_t bytes);
void bench_free(void *p, size_t bytes);

/* Bytes of the mapping that holds p backed by transparent huge pages (/proc/self/smaps
 * AnonHugePages), -1 when unknown. */
int64_t bench_huge_bytes(const void *p);

/* CPU model name, from /proc/cpuinfo where there is one ("unknown" otherwise). */
const char *bench_cpu_model(void);

typedef struct bench_suite {
    const char *name;
    const char *summary;
    int (*run)(const bench_opts_t *o); /* 0 on success */
} bench_suite_t;

#endif
