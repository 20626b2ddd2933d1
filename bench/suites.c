/* Registered benchmark suites (`kvcore bench --list`). Add one line per suite. */
#include "suites.h"

int bench_memory_run(const bench_opts_t *o);
const bench_suite_t bench_suites[] = {
    { "rope", "RoPE key re-rotation (fused, delta) and cos/sin table, GB/s of key bytes vs memcpy", bench_rope },
    { "memory", "host allocation + first touch per kind vs malloc+memset; batched and split copies vs memcpy", bench_memory_run },
int bench_transfer_run(const bench_opts_t *o); /* bench_transfer.c */

const bench_suite_t bench_suites[] = {
    { "transfer", "KV transfers per format family and direction vs memcpy (GB/s)", bench_transfer_run },
    { "coder", "CacheGen cdf/encode/decode Msym/s and bits/symbol vs entropy, next to the scalar reference coder", bench_coder_run },
    { NULL, NULL, NULL }, /* placeholder so the array is never empty; skipped by the CLI */
};
const size_t bench_suite_count = sizeof(bench_suites) / sizeof(bench_suites[0]);
