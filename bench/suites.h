/* SPDX-License-Identifier: BSD-3-Clause */
/* The table of benchmark suites: one line per suite. */
#ifndef KVC_BENCH_SUITES_H
#define KVC_BENCH_SUITES_H

#include "bench.h"

extern const bench_suite_t bench_suites[];
extern const size_t bench_suite_count;

int bench_transfer_run(const bench_opts_t *o); /* bench_transfer.c */
int bench_coder_run(const bench_opts_t *o);    /* bench_coder.c */
int bench_rope(const bench_opts_t *o);         /* bench_rope.c */
int bench_memory_run(const bench_opts_t *o);   /* bench_memory.c */
int bench_codec_run(const bench_opts_t *o);    /* bench_codec.c */
int bench_coder_dev_run(const bench_opts_t *o); /* bench_coder_dev.c */

#endif
