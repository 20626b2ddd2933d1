/* SPDX-License-Identifier: BSD-3-Clause */
/* Benchmark helpers: timing, interleaved op/baseline pairs, memcpy baseline, reporting. */
#define _GNU_SOURCE
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
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

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stat_of(double *t, int n, bench_stat_t *s)
{
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    s->best = t[0];
    s->worst = t[n - 1];
    s->median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    s->samples = n;
}

static double timed(void (*fn)(void *), void *arg)
{
    const double t0 = bench_now();
    fn(arg);
    return bench_now() - t0;
}

void bench_pair(void (*op)(void *), void *op_arg, void (*base)(void *), void *base_arg, int reps, double min_seconds,
                bench_stat_t *op_s, bench_stat_t *base_s)
{
    if (reps < 1) reps = 1;
    const int cap = 10 * reps;
    double *t = malloc(2 * (size_t)cap * sizeof(*t));
    if (!t) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    op(op_arg);
    base(base_arg);
    const double start = bench_now();
    int n = 0;
    while (n < cap && (n < reps || bench_now() - start < min_seconds)) {
        t[n] = timed(op, op_arg);
        t[cap + n] = timed(base, base_arg);
        n++;
    }
    stat_of(t, n, op_s);
    stat_of(t + cap, n, base_s);
    free(t);
}

void bench_set_rates(bench_result_t *r, double amount, const bench_stat_t *op, const bench_stat_t *base)
{
    r->value = amount / op->best;
    r->baseline_value = amount / base->best;
    r->value_median = amount / op->median;
    r->baseline_median = amount / base->median;
    r->baseline_worst = amount / base->worst;
    r->samples = op->samples;
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

void bench_memcpy_run(void *arg)
{
    bench_memcpy_job_t *j = arg;
    char *dst = j->dst;
    const char *src = j->src;
#ifdef _OPENMP
#pragma omp parallel num_threads(j->threads > 0 ? j->threads : 1)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
#else
    {
        const int t = 0, n = 1;
#endif
        const size_t share = (j->bytes / (size_t)n + 63) & ~(size_t)63;
        const size_t off = share * (size_t)t;
        if (off < j->bytes) memcpy(dst + off, src + off, off + share > j->bytes ? j->bytes - off : share);
    }
}

const char *bench_cpu_model(void)
{
    static char model[128];
    if (model[0]) return model;
    snprintf(model, sizeof(model), "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return model;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (!colon || strncmp(line, "model name", 10) != 0) continue;
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = 0;
        for (; v[n] && v[n] != '\n' && n + 1 < sizeof(model); n++)
            model[n] = (v[n] == '"' || v[n] == '\\' || (unsigned char)v[n] < 0x20) ? ' ' : v[n]; /* JSON-safe */
        model[n] = '\0';
        break;
    }
    fclose(f);
    return model;
}

/* A JSON number: integers as integers, other values in the fewest digits that read back exactly. */
static const char *num(char *buf, size_t len, double v)
{
    if (!isfinite(v)) snprintf(buf, len, "null");
    else if (v == floor(v) && fabs(v) < 0x1p53) snprintf(buf, len, "%.0f", v);
    else
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, len, "%.*g", digits, v);
            if (strtod(buf, NULL) == v) break;
        }
    return buf;
}

static double load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* MHz of cpu0 now (/proc/cpuinfo "cpu MHz"), -1 when unknown. */
static double cpu_mhz(void)
{
    double mhz = -1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return mhz;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "cpu MHz", 7) && sscanf(strchr(line, ':') ? strchr(line, ':') + 1 : line, "%lf", &mhz) == 1)
            break;
    fclose(f);
    return mhz;
}

int64_t bench_huge_bytes(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    int64_t kb = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's header line */
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "AnonHugePages: %" SCNd64 " kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int bench_case_wanted(const bench_opts_t *o, const char *name) { return !o->only || strstr(name, o->only); }

/* Ratios of one unit: a suite may mix speeds (GB/s) with sizes (bytes) or rates (bit/sym), whose
 * ratios mean different things, so each unit gets its own range and mean. */
typedef struct {
    const char *unit;
    double log_ratio, lo, hi;
    int ratios;
    char lo_name[48], hi_name[48];
} ratio_group_t;

#define RATIO_GROUPS 4

/* The suite being run: for the progress line, the table's header and the summary. */
static struct {
    const char *suite, *baseline;
    double t0;
    int cases, ngroups;
    ratio_group_t group[RATIO_GROUPS];
} cur;

static void progress_clear(const bench_opts_t *o)
{
    if (o->progress) fputs("\r\033[K", stderr);
}

static void progress_draw(const bench_opts_t *o)
{
    if (!o->progress) return;
    fprintf(stderr, "\rbench %s: %d case%s done in %.0f s, measuring the next\033[K", cur.suite, cur.cases,
            cur.cases == 1 ? "" : "s", bench_now() - cur.t0);
    fflush(stderr);
}

void bench_suite_begin(const bench_opts_t *o, const char *suite)
{
    memset(&cur, 0, sizeof(cur));
    cur.suite = suite;
    cur.t0 = bench_now();
    progress_draw(o);
}

/* ", ratios 0.52x-1.10x, geometric mean 0.84x" (or one ratio) of a group; `unit` names the unit. */
static void group_tail(char *buf, size_t len, const ratio_group_t *g, int unit)
{
    char u[24] = "";
    if (unit) snprintf(u, sizeof(u), " (%s)", g->unit);
    if (g->ratios == 1) snprintf(buf, len, ", ratio%s %.2fx", u, g->lo);
    else snprintf(buf, len, ", ratios%s %.2fx-%.2fx, geometric mean %.2fx", u, g->lo, g->hi, exp(g->log_ratio / g->ratios));
}

void bench_suite_end(const bench_opts_t *o)
{
    progress_clear(o);
    if (o->json || o->quiet || !cur.cases) return;
    char line[256], tail[160] = "";
    if (cur.ngroups == 1) group_tail(tail, sizeof(tail), &cur.group[0], 0);
    printf("%s: %d case%s, %.1f s%s\n", cur.suite, cur.cases, cur.cases == 1 ? "" : "s", bench_now() - cur.t0, tail);
    for (int k = 0; k < cur.ngroups; k++) {
        const ratio_group_t *g = &cur.group[k];
        if (cur.ngroups > 1) {
            group_tail(tail, sizeof(tail), g, 1);
            printf("  %s\n", tail + 2);
        }
        /* which cases the extremes are, when that still fits a line */
        if (g->ratios > 1 && snprintf(line, sizeof(line), "  lowest %s, highest %s", g->lo_name, g->hi_name) < 80)
            printf("%s\n", line);
    }
    fflush(stdout);
}

/* The summary group of `unit` (the last one when a suite has more units than groups). */
static ratio_group_t *group_of(const char *unit)
{
    for (int k = 0; k < cur.ngroups; k++)
        if (!strcmp(cur.group[k].unit, unit)) return &cur.group[k];
    if (cur.ngroups == RATIO_GROUPS) return &cur.group[RATIO_GROUPS - 1];
    cur.group[cur.ngroups].unit = unit;
    return &cur.group[cur.ngroups++];
}

void bench_report(const bench_opts_t *o, const bench_result_t *r)
{
    if (!bench_case_wanted(o, r->name)) return;
    progress_clear(o);
    const double ratio = r->baseline_value > 0 ? r->value / r->baseline_value : 0.0;
    const double ratio_median = r->baseline_median > 0 ? r->value_median / r->baseline_median : 0.0;
    const char *isa = o->ctx ? kvc_context_isa(o->ctx) : "unknown";
    if (o->json) {
        char v[32], b[32], q[32], vm[32], bm[32], qm[32], l[32];
        const double load = load1();
        printf("{\"suite\":\"%s\",\"case\":\"%s\",\"value\":%s,\"unit\":\"%s\",\"baseline_name\":\"%s\","
               "\"baseline_value\":%s,\"ratio\":%s,\"threads\":%d,\"cpu\":\"%s\",\"isa\":\"%s\",\"load1\":%s",
               r->suite, r->name, num(v, sizeof(v), r->value), r->unit, r->baseline_name ? r->baseline_name : "",
               num(b, sizeof(b), r->baseline_value), num(q, sizeof(q), ratio), r->threads, o->cpu ? o->cpu : bench_cpu_model(),
               isa, load >= 0 ? num(l, sizeof(l), load) : "null");
        if (r->samples > 0)
            printf(",\"value_median\":%s,\"baseline_median\":%s,\"ratio_median\":%s,\"samples\":%d",
                   num(vm, sizeof(vm), r->value_median), num(bm, sizeof(bm), r->baseline_median),
                   num(qm, sizeof(qm), ratio_median), r->samples);
        /* What decides a ratio besides the code: the cache size the streaming threshold comes from
         * (and where it came from), THP, the clock, the baseline's own spread (docs/PERFORMANCE.md). */
        kvc_llc_info_t llc;
        char mhz[32];
        const double f = cpu_mhz();
        if (o->ctx && kvc_llc_info(&llc) == KVC_OK)
            printf(",\"llc_bytes\":%" PRId64 ",\"llc_source\":\"%s\",\"stream_min_bytes\":%" PRId64, llc.bytes,
                   kvc_llc_source_name(llc.source), kvc_context_stream_min_bytes(o->ctx));
        printf(",\"thp\":\"%s\",\"cpu_mhz\":%s", kvc_thp_mode_name(kvc_thp_mode()), f > 0 ? num(mhz, sizeof(mhz), f) : "null");
        if (r->samples > 0 && r->baseline_value > 0)
            printf(",\"baseline_worst\":%s,\"baseline_spread\":%s", num(vm, sizeof(vm), r->baseline_worst),
                   num(bm, sizeof(bm), 1.0 - r->baseline_median / r->baseline_value));
        printf("%s%s}\n", r->params && *r->params ? "," : "", r->params ? r->params : "");
    } else {
        /* 79 columns: the suite's header once, the baseline when it changes, a name longer than its
         * column on a line of its own (--json has every number exactly, and the pairs' count). */
        const char *base = r->baseline_name ? r->baseline_name : "-";
        if (!cur.cases)
            printf("%s\n  (ratio: best run / baseline's best; median: median / median; -: timed once)"
                   "\n  %-27s %10s %-7s %10s %7s %7s %3s\n", r->suite, "case", "value", "unit", "baseline",
                   "ratio", "median", "thr");
        if (!cur.baseline || strcmp(cur.baseline, base)) printf("  [baseline: %s]\n", base);
        if (strlen(r->name) > 27) printf("  %s\n", r->name);
        printf("  %-27s %10.4g %-7.7s %10.4g %6.3fx", strlen(r->name) > 27 ? "" : r->name, r->value, r->unit,
               r->baseline_value, ratio);
        if (r->samples > 0) printf(" %6.3fx", ratio_median);
        else printf(" %7s", "-");
        printf(" %3d\n", r->threads);
    }
    fflush(stdout);
    cur.baseline = r->baseline_name ? r->baseline_name : "-";
    if (ratio > 0 && isfinite(ratio)) {
        ratio_group_t *g = group_of(r->unit);
        if (!g->ratios || ratio < g->lo) g->lo = ratio, snprintf(g->lo_name, sizeof(g->lo_name), "%s", r->name);
        if (!g->ratios || ratio > g->hi) g->hi = ratio, snprintf(g->hi_name, sizeof(g->hi_name), "%s", r->name);
        g->log_ratio += log(ratio);
        g->ratios++;
    }
    cur.cases++;
    progress_draw(o);
}
