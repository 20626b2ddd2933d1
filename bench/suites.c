/* Registered benchmark suites (`kvcore bench --list`). Add one line per suite. */
#include "suites.h"

int bench_transfer_run(const bench_opts_t *o); /* bench_transfer.c */
int bench_coder_dev_run(const bench_opts_t *o); /* bench_coder_dev.c */

const bench_suite_t bench_suites[] = {
    { "transfer", "KV transfers per format family and direction vs memcpy (GB/s)", bench_transfer_run },
    { "coder_dev", "CacheGen ops on the active backend's memory vs the CPU backend (Msym/s)", bench_coder_dev_run },
    { NULL, NULL, NULL }, /* placeholder so the array is never empty; skipped by the CLI */
};
const size_t bench_suite_count = sizeof(bench_suites) / sizeof(bench_suites[0]);
