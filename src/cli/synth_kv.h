/* SPDX-License-Identifier: BSD-3-Clause */
/* Synthetic KV caches with the structure CacheGen exploits, for `kvcore demo --synthetic` and
 * `kvcore bench codec`: deterministic for a seed. */
#ifndef KVC_CLI_SYNTH_KV_H
#define KVC_CLI_SYNTH_KV_H

#include <stddef.h>
#include <stdint.h>

/* fp16 [2, nl, t, nh*hs] (K plane then V plane), malloc'ed (NULL when out of memory):
 * per-channel log-normal scales, a few outlier key channels, keys smooth along tokens (AR(1)),
 * values noisier. */
uint16_t *synth_kv_f16(size_t nl, size_t t, size_t nh, size_t hs, uint64_t seed);

#endif
