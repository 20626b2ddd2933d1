/* SPDX-License-Identifier: BSD-3-Clause */
/* Registered benchmark suites (`kvcore bench --list`). Add one line per suite. */
#include "suites.h"

const bench_suite_t bench_suites[] = {
    { "transfer", "KV transfers per format family and direction vs memcpy (GB/s)", bench_transfer_run },
    { "coder", "CacheGen cdf/encode/decode Msym/s and bits/symbol vs entropy, next to the scalar reference coder", bench_coder_run },
    { "rope", "RoPE key re-rotation (fused, delta) and cos/sin table, GB/s of key bytes vs memcpy", bench_rope },
    { "codec", "CacheGen codec end to end (encode, decode) GB/s of fp16 vs memcpy, rANS vs ac; size vs fp16, vs LMCache's layout, rANS vs ac", bench_codec_run },
    { "memory", "host allocation + first touch per kind vs malloc+memset; batched and split copies vs memcpy", bench_memory_run },
    { "coder_dev", "CacheGen and rANS ops on the active backend's memory vs the CPU backend (Msym/s)", bench_coder_dev_run },
};
const size_t bench_suite_count = sizeof(bench_suites) / sizeof(bench_suites[0]);
