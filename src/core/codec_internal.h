/* Shared by the codec (codec.c) and the LMCache interchange (codec_lmcache.c). */
#ifndef KVC_CORE_CODEC_INTERNAL_H
#define KVC_CORE_CODEC_INTERNAL_H

#include <stdint.h>

#define KVC_CODEC_LMCACHE_WINDOW 256u /* LMCache's CACHEGEN_GPU_MAX_TOKENS_PER_CHUNK */

#endif
