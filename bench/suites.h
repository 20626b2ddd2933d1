/* The table of benchmark suites: one line per suite. */
#ifndef KVC_BENCH_SUITES_H
#define KVC_BENCH_SUITES_H

#include "bench.h"

extern const bench_suite_t bench_suites[];
extern const size_t bench_suite_count;

int bench_rope(const bench_opts_t *o);
int bench_coder_run(const bench_opts_t *o);

#endif
