/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore inspect --lmcache-config (lmcache_config.c). */
#ifndef KVC_CLI_LMCACHE_CONFIG_H
#define KVC_CLI_LMCACHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kvcore.h>

/* Print the LMCache settings container buf needs (bins per layer for K and V as CacheGenConfig
 * specs), or why LMCache cannot read it; with orig (the chunk the container was made from), also
 * every level's size on it relative to level 0. Returns the command's exit status. */
int cli_lmcache_config(FILE *f, const char *label, const uint8_t *buf, size_t len, const kvc_codec_info_t *info, const void *orig);

#endif
