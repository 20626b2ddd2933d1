/* SPDX-License-Identifier: BSD-3-Clause */
/* The .kvc container (docs/FORMAT.md): serialisation and strict validation only. The codec
 * (src/core/codec.c) fills / consumes the parsed view; this file never interprets symbols. */
#ifndef KVC_CORE_CONTAINER_H
#define KVC_CORE_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/codec.h>
#include <kvcore/status.h>
#include <kvcore/types.h>

#define KVC_CONTAINER_MAGIC "\x89KVC\r\n\x1a\n"
#define KVC_CONTAINER_VERSION_MAJOR 1
#define KVC_CONTAINER_VERSION_MINOR 4 /* the newest minor this kvcore reads and writes */
/* KVC_CONTAINER_HEADER_BYTES and the probe: <kvcore/codec.h> */
#define KVC_CONTAINER_SECTION_BYTES 16
#define KVC_CONTAINER_MAX_BINS 64
#define KVC_CONTAINER_FLAG_RAW_CDF 1u /* CDF stored as LMCache's uint16 table (imported streams) */
#define KVC_CONTAINER_FLAG_NO_HEADS 2u /* head split unknown: NH = 1, HS = C are nominal */
#define KVC_CONTAINER_FLAG_CHANNEL_KEYS 4u /* plane 0 scaled per (layer, channel): format 1.1 */
/* rANS containers (format 1.4) set all three of these bits: */
#define KVC_CONTAINER_FLAG_RANS 8u /* STREAMS are interleaved rANS */
#define KVC_CONTAINER_FLAG_RANS_SPAN4 16u /* one stream per 32 channels (4 groups of 8) */
/* the coded CDF in byte-aligned parts of streams behind an index of their sizes, so that threads
 * parse the parts at once */
#define KVC_CONTAINER_FLAG_CDF_INDEX 32u
#define KVC_CONTAINER_MAX_CDF_PARTS 4096 /* an index with more parts is corrupt */
#define KVC_CONTAINER_FLAGS_RANS (KVC_CONTAINER_FLAG_RANS | KVC_CONTAINER_FLAG_RANS_SPAN4 | KVC_CONTAINER_FLAG_CDF_INDEX)
/* Flags that need format 1.1 (the rANS ones need 1.4): an older file cannot carry them. */
#define KVC_CONTAINER_FLAGS_MINOR1 (KVC_CONTAINER_FLAG_NO_HEADS | KVC_CONTAINER_FLAG_CHANNEL_KEYS)
#define KVC_CONTAINER_FLAGS_KNOWN (KVC_CONTAINER_FLAG_RAW_CDF | KVC_CONTAINER_FLAGS_MINOR1 | KVC_CONTAINER_FLAGS_RANS)

enum { KVC_SECTION_META = 1, KVC_SECTION_SCALES = 2, KVC_SECTION_CDF = 3, KVC_SECTION_LENGTHS = 4, KVC_SECTION_STREAMS = 5 };
enum { KVC_CT_LAYOUT_KV_2LTD = 0, KVC_CT_LAYOUT_MLA = 1 };

/* Parsed (or to-be-written) container. Pointers refer into the container buffer (parse) or to the
 * caller's arrays (write); arrays owned by the struct are marked. */
typedef struct kvc_container {
    uint32_t flags;
    uint16_t version_minor; /* parse: the container's minor version */
    uint8_t dtype;        /* a kvc_dtype_t: f16 (1), bf16 (2) or f32 (3), stored as is */
    uint8_t layout;       /* KVC_CT_LAYOUT_* */
    uint8_t kvs;          /* planes: 2 (K, V) or 1 (MLA) */
    uint8_t cdf_bins;     /* CDF width - 1 (LMCache: max bins over layers, 32) */
    uint32_t num_layers, num_tokens, num_heads, head_size;
    uint32_t window_tokens, num_windows;
    uint8_t bins[2 * 4096]; /* quantiser bins per (plane, layer) */

    const void *scales;   /* [kvs, NL, T] in dtype; CHANNEL_KEYS: plane 0 is [NL, C] */
    size_t scales_bytes;
    /* CDF: exactly one of these, by flags. counts: uint32 [kvs*NL*C][cdf_bins] (owned after parse) */
    uint32_t *counts;
    const uint8_t *raw_cdf; /* uint16 LE [kvs*NL*C][cdf_bins+1] */
    /* lengths: uint32 [num_windows][kvc_container_coded_per_window] (owned after parse) */
    uint32_t *lengths;
    const uint8_t *streams;
    size_t streams_bytes;
    int threads;          /* write: threads for coding the CDF section (0 or 1: the calling thread) */
} kvc_container_t;

static inline uint64_t kvc_container_streams_per_window(const kvc_container_t *c)
{
    return (uint64_t)c->kvs * c->num_layers * c->num_heads * c->head_size;
}

/* Coded streams (LENGTHS entries) per window: one per CDF stream for the arithmetic coder, one per
 * (plane, layer, 32 channels) for rANS. */
static inline uint64_t kvc_container_coded_per_window(const kvc_container_t *c)
{
    if (!(c->flags & KVC_CONTAINER_FLAG_RANS)) return kvc_container_streams_per_window(c);
    return (uint64_t)c->kvs * c->num_layers * (((uint64_t)c->num_heads * c->head_size + 31) / 32);
}

/* Scales the SCALES section holds: per (plane, layer) T, or C for plane 0 with CHANNEL_KEYS. */
static inline uint64_t kvc_container_num_scales(const kvc_container_t *c)
{
    const uint64_t per0 = c->flags & KVC_CONTAINER_FLAG_CHANNEL_KEYS ? (uint64_t)c->num_heads * c->head_size : c->num_tokens;
    return (uint64_t)c->num_layers * (per0 + (uint64_t)(c->kvs - 1) * c->num_tokens);
}

/* Bytes kvc_container_write will produce. */
kvc_status_t kvc_container_size(const kvc_container_t *c, size_t *bytes);
/* Serialise into out (cap bytes, at least kvc_container_size). */
kvc_status_t kvc_container_write(const kvc_container_t *c, uint8_t *out, size_t cap, size_t *written);
/* kvc_container_size + kvc_container_write in one pass into a new buffer (free()). */
kvc_status_t kvc_container_write_alloc(const kvc_container_t *c, uint8_t **out, size_t *written);
/* Validate every field and checksum and fill c (counts/lengths are allocated; free with
 * kvc_container_release). KVC_ERR_CORRUPT for anything malformed or truncated, KVC_ERR_VERSION for
 * another major version. Never reads outside buf[0, len). With threads > 1 the CDF's count parts
 * and STREAMS' checksum (in pieces) are read by up to `threads` threads at once; the statuses and
 * messages are those of the parse in order, on the calling thread. */
kvc_status_t kvc_container_parse(const uint8_t *buf, size_t len, kvc_container_t *c, int threads);
void kvc_container_release(kvc_container_t *c);

#endif
