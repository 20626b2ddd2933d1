/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen codec: a KV chunk (KV_2LTD or MLA; fp16, bf16 or fp32) to and from a self-describing,
 * checksummed .kvc container (docs/FORMAT.md). The coded streams are LMCache's: per (plane, layer)
 * max-abs quantisation, a per-(plane, layer, channel) CDF over the whole chunk, and 32-bit
 * arithmetic coding in windows of 256 tokens; the CDF table is stored as Rice-coded counts.
 * Thread safety: encode and decode may run on one context from any number of threads at once
 * (context.h); inspect, layer statistics, import and export take no context and touch only their
 * arguments. The progress callback runs on the calling thread. */
#ifndef KVCORE_CODEC_H
#define KVCORE_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvc_codec_layout {
    KVC_CODEC_KV_2LTD = 0, /* [2, NL, T, NH*HS]: K plane then V plane */
    KVC_CODEC_MLA = 1,     /* [NL, T, HS] (num_heads must be 1) */
} kvc_codec_layout_t;

enum {
    KVC_CODEC_PARAM_BINS = 1u << 0,   /* bins: per (plane, layer); default LMCache's (kvc_cg_default_bins) */
    KVC_CODEC_PARAM_WINDOW = 1u << 1, /* window_tokens; default 256 (LMCache) */
    KVC_CODEC_PARAM_PROGRESS = 1u << 2, /* progress callback */
    /* The head split of the C channels is unknown (e.g. a [2, NL, T, C] file): pass num_heads = 1,
     * head_size = C; the container records that NH and HS are nominal (info.heads_known = 0). */
    KVC_CODEC_PARAM_HEADS_UNKNOWN = 1u << 3,
    KVC_CODEC_PARAM_KEY_SCALING = 1u << 4, /* key_scaling; default KVC_CODEC_SCALE_TOKEN */
    /* bits: a size target in bits per element (whole container); the encoder chooses the bins
     * per (plane, layer) (docs/CACHEGEN.md "Rate target"). Not with KVC_CODEC_PARAM_BINS or
     * per-channel keys. */
    KVC_CODEC_PARAM_BITS = 1u << 5,
    KVC_CODEC_PARAM_CODER = 1u << 6, /* coder; default KVC_CODER_AC */
};

/* The entropy coder of the STREAMS section. KVC_CODER_AC is LMCache's arithmetic coder (LMCache
 * reads the container). KVC_CODER_RANS is kvcore's interleaved rANS (container format 1.4; the
 * same symbols and counts, one stream of 8 states per 32 channels; LMCache cannot read it:
 * docs/CACHEGEN.md "rANS coder"). */
typedef enum kvc_codec_coder {
    KVC_CODER_AC = 0,
    KVC_CODER_RANS = 1,
} kvc_codec_coder_t;

/* How plane 0 (keys; MLA's latent) is scaled before quantisation. Per token is LMCache's scheme:
 * one max-abs per (layer, token) over all channels, so a few outlier key channels leave the others
 * few levels. Per channel takes one max-abs per (layer, channel) over the chunk's tokens (container
 * format 1.1; LMCache cannot read it). Values (plane 1) are always scaled per token. */
typedef enum kvc_codec_scaling {
    KVC_CODEC_SCALE_TOKEN = 0,
    KVC_CODEC_SCALE_CHANNEL = 1,
} kvc_codec_scaling_t;

/* Called after each coded window (done of total), from the calling thread. */
typedef void (*kvc_codec_progress_fn)(void *user, size_t done, size_t total);

typedef struct kvc_codec_params {
    uint64_t field_mask;
    kvc_dtype_t dtype;          /* KVC_DTYPE_F16, _BF16 or _F32 */
    kvc_codec_layout_t layout;
    size_t num_layers, num_tokens, num_heads, head_size;
    const uint32_t *bins;       /* [planes * num_layers], each in [4, 64] */
    uint32_t window_tokens;
    kvc_codec_progress_fn progress;
    void *progress_user;
    kvc_codec_scaling_t key_scaling;
    double bits;                /* KVC_CODEC_PARAM_BITS: target bits per element, > 0 */
    kvc_codec_coder_t coder;    /* KVC_CODEC_PARAM_CODER */
} kvc_codec_params_t;

/* Named quality levels, relative to LMCache's default for the cache's layer count
 * (kvc_cg_default_bins): level 0 is that default; levels 1-3 give the K and V bins of a layer
 * LMCache codes with 32 bins, and a layer it codes with 16 (keys from layer 10, values from layer
 * 2, in caches of 10 or more layers) gets half, rounded up to even, at least 4. All scale keys per
 * token. Chosen by stated rules on bench/quality's tuning set, reported on its held-out set
 * (docs/QUALITY.md: stories260K, 5 layers, head_dim 8; sizes also for a 32-layer cache):
 *   0  LMCache's default, the reference;
 *   1  K 62 / V 12: 6.9 % smaller than level 0 with 5 layers (9.6 % with 32), mean KL a
 *      quarter of level 0's, no held-out run worse;
 *   2  K 46 / V 8: 20 % smaller with 5 layers (27 % with 32), lower mean KL than level 0 but
 *      worse on 8 of 40 held-out runs;
 *   3  K 32 / V 8: 26 % smaller with 5 layers (36 % with 32), mean KL 16 % above level 0's.
 * The 32-layer figures are sizes only: no model with 10 or more layers measured the halved bins.
 * LMCache's decoder decodes every level, but dequantises with the bins of its per-model config:
 * levels 1-3 need that config to list theirs (kvcore inspect --lmcache-config); LMCache's encoder
 * cannot make them (different K and V CDF widths).
 * Sets p->bins = bins (caller storage of 2 * num_layers entries; p->layout and p->num_layers must
 * be set), p->key_scaling and the matching field_mask bits. KVC_ERR_INVALID_ARG for NULL, an
 * unknown level or a zero / oversized num_layers. */
#define KVC_CODEC_LEVEL_MAX 3
KVC_API kvc_status_t kvc_codec_level_params(int level, kvc_codec_params_t *p, uint32_t *bins);

/* Container header and size breakdown (kvc_codec_inspect). */
typedef struct kvc_codec_info {
    kvc_dtype_t dtype;
    kvc_codec_layout_t layout;
    size_t planes, num_layers, num_tokens, num_heads, head_size;
    uint32_t window_tokens, num_windows, cdf_bins;
    unsigned version_major, version_minor;
    int raw_cdf;               /* CDF stored as LMCache's table (imported) rather than coded counts */
    size_t container_bytes;    /* whole .kvc */
    size_t original_bytes;     /* the uncompressed chunk in its dtype */
    size_t streams_bytes, cdf_bytes, scales_bytes, lengths_bytes, meta_bytes;
    size_t lmcache_bytes;      /* same streams in LMCache's layout: int16 CDF, int32 lengths, dtype scales */
    int heads_known;           /* 0: encoded with KVC_CODEC_PARAM_HEADS_UNKNOWN (num_heads 1 is nominal) */
    kvc_codec_scaling_t key_scaling;
    int lmcache_readable;      /* LMCache's GPU decoder can decode its streams (kvc_codec_export_lmcache
                                  succeeds); LMCache dequantises them right only with a config listing
                                  the container's bins (docs/CACHEGEN.md "LMCache readability") */
    kvc_codec_coder_t coder;   /* the coder of its streams */
} kvc_codec_info_t;

/* ---- Probing bytes --------------------------------------------------------------------------------
 * What a buffer's first bytes are, from the container header (docs/FORMAT.md "Header") and, when it
 * is in the bytes, META, without reading the other sections: for telling a file's type, sizing a
 * read from a pipe, or walking a stream (.kvcs) container by container. */
#define KVC_CONTAINER_HEADER_BYTES 48   /* the header: what the probe needs to say more than the magic */
#define KVC_CONTAINER_PROBE_BYTES 8288  /* the most the probe reads: the header and the largest META section */

typedef enum kvc_container_kind {
    KVC_CONTAINER_NONE = 0,    /* not a container: another magic, or fewer bytes than the magic's 8 */
    KVC_CONTAINER_INVALID = 1, /* the magic, with a header cut short or failing a check (the status says which) */
    KVC_CONTAINER_PART = 2,    /* a valid header; the bytes end before its total size (needed_bytes) */
    KVC_CONTAINER_ONE = 3,     /* a valid header whose total size is exactly len */
    KVC_CONTAINER_STREAM = 4,  /* a valid header and more bytes after its container: a stream, or trailing data */
} kvc_container_kind_t;

typedef struct kvc_container_info {
    kvc_container_kind_t kind;
    /* version and total size: as the header says them once its checksum passes (also when a
     * later check fails: KVC_ERR_VERSION, a reserved byte, ...) */
    unsigned version_major, version_minor;
    uint32_t flags;            /* the header's flag bits (docs/FORMAT.md) */
    size_t header_bytes;       /* the header's size (KVC_CONTAINER_HEADER_BYTES) */
    uint64_t container_bytes;  /* the first container's total size */
    uint64_t needed_bytes;     /* bytes to have: the header's with fewer, else container_bytes; 0 for NONE */
    kvc_codec_coder_t coder;   /* of its streams */
    int raw_cdf;               /* the CDF is LMCache's table (imported with kvc_codec_import_lmcache) */
    int heads_known;           /* as kvc_codec_info_t */
    kvc_codec_scaling_t key_scaling;
    int meta;                  /* 1: the whole META section was in the bytes and valid; the fields below are set */
    kvc_dtype_t dtype;
    kvc_codec_layout_t layout;
    size_t planes, num_layers, num_tokens, num_heads, head_size;
    uint32_t window_tokens, num_windows, cdf_bins;
} kvc_container_info_t;

/* Describe the container that buf[0, len) starts with, reading at most KVC_CONTAINER_PROBE_BYTES:
 * the magic, the header (its checksum and every check kvc_codec_inspect makes of it, but the total
 * size, which may be more or less than len: kind) and, when all of it is in the bytes, META. info is
 * filled as far as the bytes were read, also on an error. KVC_ERR_INVALID_ARG: info NULL, or buf
 * NULL with len > 0. KVC_ERR_CORRUPT: another magic (kind NONE), fewer bytes than the header
 * (needed_bytes = KVC_CONTAINER_HEADER_BYTES), a header checksum mismatch, unexpected header sizes,
 * a total size smaller than a header and five sections, a non-zero reserved byte, flags that are
 * unknown (at a minor version this kvcore reads) or inconsistent, a damaged META. KVC_ERR_VERSION:
 * another major version, or a newer minor that sets flags this kvcore does not know. */
KVC_API kvc_status_t kvc_container_probe(const void *buf, size_t len, kvc_container_info_t *info);

/* Per (plane, layer) statistics of a container: coded bits per symbol and the empirical entropy of
 * the symbols (from the stored counts), both averaged over the layer's channels. */
typedef struct kvc_codec_layer_stats {
    unsigned plane, layer, bins;
    double bits_per_symbol;
    double entropy_bits;
} kvc_codec_layer_stats_t;

/* Compress one chunk `kv` (host memory, C order, shape per layout). *out receives a new buffer
 * (free with kvc_codec_free) of *out_len bytes. Errors: KVC_ERR_INVALID_ARG (NULL, zero sizes,
 * bins outside [4, 64] or not even, an unknown coder, rANS windows of more than 2^26 tokens; bits not finite and > 0, bits with bins or per-channel keys,
 * bits below what 4 bins everywhere code this chunk to), KVC_ERR_DTYPE, KVC_ERR_SHAPE (MLA with num_heads != 1, more
 * than 4096 layers, sizes that overflow). */
KVC_API kvc_status_t kvc_codec_encode(kvc_context_t *ctx, const kvc_codec_params_t *p, const void *kv, uint8_t **out,
                                      size_t *out_len);
KVC_API void kvc_codec_free(void *p);

/* Validate the whole container and describe it: every check kvc_codec_decode makes except decoding
 * the coded streams (header, reserved fields, every section and checksum, META, every scale finite
 * and >= 0, CDF counts or a stored CDF strictly increasing, LENGTHS varints and their sum). KVC_ERR_CORRUPT / KVC_ERR_VERSION as
 * decode; a container inspect accepts can still fail decode only if its coded streams decode to a
 * symbol outside the quantiser's range. */
KVC_API kvc_status_t kvc_codec_inspect(const void *buf, size_t len, kvc_codec_info_t *info);

/* Per-layer statistics; stats holds info.planes * info.num_layers entries. Validates the whole
 * container. */
KVC_API kvc_status_t kvc_codec_layer_stats(const void *buf, size_t len, kvc_codec_layer_stats_t *stats, size_t count);

/* Decompress into a caller buffer of out_bytes (at least info.original_bytes: else
 * KVC_ERR_NO_SPACE), or into a new tensor (kvc_codec_decode_alloc; shape [2, NL, T, NH*HS] or
 * [NL, T, HS]). Every field is validated first: KVC_ERR_CORRUPT for a malformed, truncated or
 * corrupted container, KVC_ERR_VERSION for another major format version. info may be NULL. */
KVC_API kvc_status_t kvc_codec_decode(kvc_context_t *ctx, const void *buf, size_t len, void *out, size_t out_bytes,
                                      kvc_codec_info_t *info);
KVC_API kvc_status_t kvc_codec_decode_alloc(kvc_context_t *ctx, const void *buf, size_t len, kvc_tensor_t *out);

/* Optional arguments of kvc_codec_decode_ex: field_mask says which are set (0 or p NULL: none,
 * exactly kvc_codec_decode); another bit is KVC_ERR_INVALID_ARG. */
enum {
    /* progress(progress_user, done, total) after each coded window is decoded, with total the
     * number of windows + 1, and a last call (total, total) once the values are restored; on the
     * calling thread. A NULL progress is not called. */
    KVC_CODEC_DECODE_PARAM_PROGRESS = 1u << 0,
};
typedef struct kvc_codec_decode_params {
    uint64_t field_mask;
    kvc_codec_progress_fn progress;
    void *progress_user;
} kvc_codec_decode_params_t;
/* kvc_codec_decode with optional arguments (a progress callback): same checks, statuses and
 * output. */
KVC_API kvc_status_t kvc_codec_decode_ex(kvc_context_t *ctx, const void *buf, size_t len, void *out, size_t out_bytes,
                                         const kvc_codec_decode_params_t *p, kvc_codec_info_t *info);

/* ---- LMCache interchange ------------------------------------------------------------------------
 * LMCache's CacheGen object (CacheGenGPUEncoderOutput, docs/CACHEGEN.md) as plain host arrays: LMCache
 * pickles torch tensors; turning them into arrays (t.cpu().numpy()) is the caller's job. The coded
 * streams are the same bytes in both worlds, so import and export copy them and never re-code. */
typedef struct kvc_lmcache_window {
    const uint8_t *bytes;   /* bytestream: the window's streams back to back, stream k = plane*NL*C + layer*C + channel */
    size_t nbytes;
    const int32_t *lengths; /* bytestream_lengths [planes * NL * C] */
    size_t num_tokens;      /* ntokens */
} kvc_lmcache_window_t;

typedef struct kvc_lmcache_chunk {
    kvc_dtype_t dtype;         /* the KV dtype, which is also the maxima's: f16, bf16 or f32 */
    kvc_codec_layout_t layout; /* KV_2LTD: planes K and V; MLA: one plane */
    size_t num_layers, num_tokens, num_heads, head_size;
    uint32_t cdf_bins;         /* the CDF has cdf_bins + 1 entries per stream (LMCache: 32) */
    const uint16_t *cdf;       /* [planes * NL * C][cdf_bins + 1] (LMCache stores it as int16: same bits) */
    const void *max_key;       /* max_tensors_key [NL, T(, 1)] in dtype */
    const void *max_value;     /* max_tensors_value [NL, T(, 1)]; NULL for MLA */
    const uint32_t *bins;      /* quantiser bins per (plane, layer) LMCache's config used, each even and
                                  in [4, cdf_bins]; NULL: LMCache's defaults (kvc_cg_default_bins) */
    size_t num_windows;
    const kvc_lmcache_window_t *windows; /* every window but the last has the same token count */
} kvc_lmcache_chunk_t;

/* LMCache object -> .kvc container (*out: free with kvc_codec_free). The CDF table is stored as
 * coded counts when it is LMCache's normalisation of whole-chunk counts (so the container is as
 * small as one kvcore encoded itself, and byte-identical to it), else verbatim (info.raw_cdf).
 * Everything is validated: KVC_ERR_INVALID_ARG (NULL, zero sizes, bad bins), KVC_ERR_DTYPE,
 * KVC_ERR_SHAPE (window token counts that do not add up to num_tokens or are not uniform),
 * KVC_ERR_CORRUPT (a CDF row that does not start at 0 or is not strictly increasing, a negative
 * length, lengths that do not add up to the window's bytes). */
KVC_API kvc_status_t kvc_codec_import_lmcache(const kvc_lmcache_chunk_t *in, uint8_t **out, size_t *out_len);

/* .kvc container -> LMCache object. *storage receives one allocation holding every array `out`
 * points to (free it with kvc_codec_free; `out` then dangles). The container is validated first
 * (KVC_ERR_CORRUPT, KVC_ERR_VERSION); a container with windows over 256 tokens, which LMCache's
 * decoder cannot take, is KVC_ERR_UNSUPPORTED. */
KVC_API kvc_status_t kvc_codec_export_lmcache(const void *buf, size_t len, kvc_lmcache_chunk_t *out, void **storage);

/* ---- Streams: a KV cache of many chunks ----------------------------------------------------------
 * A stream (.kvcs) is ordinary containers back to back, one per chunk of up to chunk_tokens tokens
 * in token order; each is self-delimiting by its header's total size (docs/FORMAT.md "Streams").
 * Chunk-parallel: K = min(context threads, KVC_CODEC_STREAM_MAX_IN_FLIGHT) chunks are coded at
 * once, one thread each (the codec's parallel regions nested in it run on that thread under
 * OpenMP's default of one active level); with one thread, or when nested parallelism is enabled
 * (OMP_MAX_ACTIVE_LEVELS > 1, where inner teams would multiply the threads), K = 1 and each chunk
 * is coded with all the context's threads. Output is the same bytes for every K. Memory is bounded
 * by K chunks: the encoder holds K input chunks and their containers, the decoder K containers and
 * their decoded chunks, plus one codec scratch set per chunk in flight, whatever the total T.
 * Callbacks (read, write, progress) are called only on the calling thread, in chunk order; the
 * readers read up to K - 1 chunks ahead of the last write. On an error, the chunks before it are
 * written and nothing after it (the chunks after it in flight are dropped). */
#define KVC_CODEC_STREAM_MAX_IN_FLIGHT 4

/* Fill dst with tokens [token0, token0 + ntokens) of the whole tensor, as one chunk in the
 * layout's shape ([2, NL, ntokens, C] or [NL, ntokens, HS], C order). A non-OK status stops the
 * stream and is returned. */
typedef kvc_status_t (*kvc_codec_chunk_read_fn)(void *user, size_t token0, size_t ntokens, void *dst);
/* Take len bytes of the stream. */
typedef kvc_status_t (*kvc_codec_bytes_write_fn)(void *user, const void *buf, size_t len);
/* Read up to len bytes of the stream into buf; *got < len only at the end of the stream. */
typedef kvc_status_t (*kvc_codec_bytes_read_fn)(void *user, void *buf, size_t len, size_t *got);
/* Take one decoded chunk: tokens [token0, token0 + info->num_tokens), shaped as that chunk. */
typedef kvc_status_t (*kvc_codec_chunk_write_fn)(void *user, size_t token0, const void *chunk,
                                                 const kvc_codec_info_t *info);

/* Encode p->num_tokens tokens (the whole cache) as ceil(T / chunk_tokens) containers, each chunk
 * encoded exactly as kvc_codec_encode encodes it alone (byte-identical), and written in order.
 * p->progress, when set, is called after each chunk with (tokens done, total tokens). Errors:
 * those of kvc_codec_encode for the first chunk's parameters, KVC_ERR_INVALID_ARG for NULL
 * callbacks or chunk_tokens 0, and any status a callback returns. */
KVC_API kvc_status_t kvc_codec_encode_stream(kvc_context_t *ctx, const kvc_codec_params_t *p, size_t chunk_tokens,
                                             kvc_codec_chunk_read_fn read, void *read_user,
                                             kvc_codec_bytes_write_fn write, void *write_user);

/* Decode a stream chunk by chunk, handing each decoded chunk to write in token order. *first
 * (may be NULL) receives the first container's description with num_tokens, original_bytes and
 * container_bytes summed over the stream. KVC_ERR_CORRUPT for an empty stream, a truncated
 * container, a header with a bad magic or checksum, or a chunk whose dtype, layout, layers or
 * heads differ from the first's; any error of kvc_codec_decode for a chunk; any status a callback
 * returns. Chunks before a failure have already been written. */
KVC_API kvc_status_t kvc_codec_decode_stream(kvc_context_t *ctx, kvc_codec_bytes_read_fn read, void *read_user,
                                             kvc_codec_chunk_write_fn write, void *write_user,
                                             kvc_codec_info_t *first);

#ifdef __cplusplus
}
#endif
#endif
