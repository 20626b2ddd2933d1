/* Registered benchmark suites (`kvcore bench --list`). Add one line per suite. */
#include "suites.h"

const bench_suite_t bench_suites[] = {
    { "coder", "CacheGen cdf/encode/decode Msym/s and bits/symbol vs entropy, next to the scalar reference coder", bench_coder_run },
    { NULL, NULL, NULL }, /* placeholder so the array is never empty; skipped by the CLI */
};
const size_t bench_suite_count = sizeof(bench_suites) / sizeof(bench_suites[0]);
