/* SPDX-License-Identifier: BSD-3-Clause */
/* KV transfers between an engine's paged KV cache and LMCache-style contiguous chunks.
 *
 * Every op is a byte-exact copy (no dtype conversion; element size 1, 2, 4 or 8 bytes). The core
 * validates every argument before any byte moves, so a call that returns an error has changed
 * nothing. Direction follows LMCache: KVC_H2D = chunk -> paged cache (retrieve), KVC_D2H = paged
 * cache -> chunk (store). Slots and block ids are int64 and declared as such (KVC_INDEX_INT64).
 * A chunk (chunk, key_value, or any of objects) that shares bytes with an engine tensor (each
 * pointer's tensor from its first byte to the end of its last block's content: the padding of a
 * padded block step counts between blocks, not after the last) is KVC_ERR_OVERLAP: checked by
 * range intersection.
 * docs/TRANSFER.md has the format table and the deliberate differences from LMCache.
 * Thread safety: any number of threads may transfer through one context at once (context.h);
 * transfers whose destinations overlap race on those bytes. */
#ifndef KVCORE_TRANSFER_H
#define KVCORE_TRANSFER_H

#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* LMCache's EngineKVFormat: the integers are ABI and identical to LMCache's. Names read as the
 * engine's containers: "_X_" separates list levels, other tokens are tensor dimensions; CS is the
 * fused per-head K|V width (= 2*HS). Per-tensor shapes are in docs/TRANSFER.md. */
typedef enum kvc_format {
    KVC_FMT_NB_NL_TWO_BS_NH_HS = 0,     /* one tensor [NB, NL, 2, BS, NH, HS] (vLLM cross-layer) */
    KVC_FMT_NL_X_TWO_NB_BS_NH_HS = 1,   /* NL x [2, NB, BS, NH, HS] (vLLM flash-attention) */
    KVC_FMT_NL_X_NB_TWO_BS_NH_HS = 2,   /* NL x [NB, 2, BS, NH, HS] (vLLM FlashInfer) */
    KVC_FMT_NL_X_NB_BS_HS = 3,          /* NL x [NB, BS, HS] (vLLM MLA) */
    KVC_FMT_TWO_X_NL_X_NBBS_NH_HS = 4,  /* [K list, V list] of NL x [NB*BS, NH, HS] (SGLang MHA) */
    KVC_FMT_NL_X_NBBS_ONE_HS = 5,       /* NL x [NB*BS, 1, HS] (SGLang MLA) */
    KVC_FMT_NL_X_TWO_NB_NH_BS_HS = 6,   /* NL x [2, NB, NH, BS, HS] (flash-attention, HND) */
    KVC_FMT_NL_X_NB_TWO_NH_BS_HS = 7,   /* NL x [NB, 2, NH, BS, HS] (FlashInfer, HND) */
    KVC_FMT_NB_NL_TWO_NH_BS_HS = 8,     /* one tensor [NB, NL, 2, NH, BS, HS] (TRT-LLM cross-layer) */
    KVC_FMT_TWO_X_NL_X_NB_BS_NH_HS = 9, /* [K list, V list] of NL x [NB, BS, NH, HS] (SGLang, MP) */
    KVC_FMT_NL_X_NB_NH_BS_TWO_HS = 10,  /* NL x [NB, NH, BS, 2*HS] (fused K|V, HND) */
    KVC_FMT_NL_X_NB_BS_NH_TWO_HS = 11,  /* NL x [NB, BS, NH, 2*HS] (fused K|V, NHD) */
    KVC_FMT_NL_X_NB_NH_BS_CS = 12,      /* NL x [NB, NH, BS, CS] (vLLM unified cache, HND) */
    KVC_FMT_NL_X_NB_BS_NH_CS = 13,      /* NL x [NB, BS, NH, CS] (vLLM unified cache, NHD) */
    KVC_FMT_NL_X_NB_BSV_BSS = 14,       /* NL x [NB, BS, R] bytes, each block [BS x values][BS x 4-byte
                                           scale] (vLLM DeepSeek-V3.2 DSA indexer K cache, R = 132) */
    KVC_FMT_NL_X_TWO_NB_NH_ONE_BS_HS = 15, /* NL x [2, NB, NH, 1, BS, HS]: the bytes of format 6 (RBLN) */
    KVC_FMT_NL_X_TWO_X_NB_BS_NH_HS = 16,   /* NL x (K, V) of [NB, BS, NH, HS]; ptrs K_0, V_0, K_1, V_1, ... */
    KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS = 17,   /* NL x NP planes [NB, BS, 1, width_p] (vLLM-Ascend MLA / DSA
                                              tuples); ptrs layer-major; widths in shape.plane_bytes */
    KVC_FMT_NL_X_TWO_X_NB_BS_HS = 17,      /* LMCache's earlier name of 17 */
} kvc_format_t;

#define KVC_FORMAT_COUNT 18
/* Most planes a format-17 layer may have (LMCache: 2 for MLA, 3 for DSA, up to 4). */
#define KVC_MAX_PLANES 4

/* Element type of a slot mapping or block id list. Only int64 is accepted: it is declared rather
 * than assumed so that an int32 tensor handed over by a binding is rejected (KVC_ERR_DTYPE) instead
 * of being misread. 0 is deliberately not a valid value. */
typedef enum kvc_index_type {
    KVC_INDEX_INT32 = 1,
    KVC_INDEX_INT64 = 2,
} kvc_index_type_t;

/* Layout of the chunk side: 0-2 are LMCache's MemObjKVLayout values (the fused formats 10-13); 3 is
 * its PageBufferShapeDesc.kv_interleaved object layout ("L2TD"). */
typedef enum kvc_chunk_layout {
    KVC_CHUNK_DEFAULT = 0,        /* [2, NL, T, NH*HS]; MLA [NL, T, HS]; fused formats: as FUSED_PACKED */
    KVC_CHUNK_SPLIT_KV = 1,       /* [2, NL, T, NH*HS] (fused formats: K and V halves split into planes) */
    KVC_CHUNK_FUSED_PACKED = 2,   /* [1, NL, T, NH*CS]: each head's K|V kept together (fused formats only) */
    KVC_CHUNK_INTERLEAVED_KV = 3, /* [NL, 2, T, NH*HS]: each layer's K rows, then its V rows (two-plane
                                     formats that are neither MLA nor fused) */
} kvc_chunk_layout_t;

/* Format predicates (LMCache's format_facts). Unknown values give 0 for every predicate.
 * Exactly one of cross_layer / kv_list / layer_list holds for a known format. */
KVC_API int kvc_format_is_valid(int format);
KVC_API int kvc_format_is_cross_layer(int format); /* 0, 8: one tensor holding every layer */
KVC_API int kvc_format_is_kv_list(int format);     /* 4, 9: separate K and V lists */
KVC_API int kvc_format_is_layer_list(int format);  /* 1-3, 5-7, 10-17: one entry per layer */
KVC_API int kvc_format_is_mla(int format);         /* 3, 5, 14, 17: one latent plane */
KVC_API int kvc_format_is_hnd(int format);         /* 6, 7, 8, 10, 12, 15: heads outside tokens in a block */
KVC_API int kvc_format_is_fused_packed(int format);/* 10-13: K|V fused in the trailing dimension */
KVC_API int kvc_format_is_two_major(int format);   /* 1, 6, 15: the K/V axis outside the block axis */
KVC_API int kvc_format_is_pbs_fused(int format);   /* 5: blocks and tokens folded into one axis */
KVC_API int kvc_format_is_kv_second_tuple(int format); /* 16, 17: each layer a tuple of tensors */
/* "NL_X_TWO_NB_BS_NH_HS" etc.; "unknown" for values outside the enum. 17 is "NL_X_NP_X_NB_BS_ONE_HS". */
KVC_API const char *kvc_format_name(int format);
/* Entries the engine pointer table needs: 1 (cross-layer), NL (layer list), 2*NL (K/V lists, K
 * first; format 16, K_l and V_l per layer); -1 for an unknown format, nl < 1, and format 17, whose
 * count depends on its plane count (kvc_shape_ptr_count). */
KVC_API int64_t kvc_format_ptr_count(int format, int64_t nl);

/* LMCache's PageBufferShapeDesc: the engine side's geometry. */
typedef struct kvc_page_shape {
    int32_t kv_size;      /* planes in the engine tensors: 2 (K, V); 1 for MLA and fused formats */
    int32_t element_size; /* bytes per element: 1, 2, 4 or 8 */
    int64_t nl;           /* layers */
    int64_t nb;           /* blocks (pages) per layer; slots are in [0, nb*bs) */
    int64_t bs;           /* tokens per block */
    int64_t nh;           /* KV heads (1 for MLA) */
    int64_t hs;           /* elements per head; fused formats: the fused width CS = 2*HS */
    /* Elements between consecutive blocks of one plane, 0 = tight (bs*nh*hs). Padded pools: only
     * the single-plane formats with a block axis (3, 10-14) accept it (docs/TRANSFER.md);
     * it must be >= bs*nh*hs. */
    int64_t block_stride_elems;
    /* Format 17 only (0 for every other format): planes per layer, 1..KVC_MAX_PLANES, and the bytes
     * of one token's row in plane p (> 0). A chunk row is the planes' rows concatenated, so they
     * must sum to hs * element_size (hs counts chunk elements; planes may hold other types). */
    int32_t num_planes;
    int64_t plane_bytes[KVC_MAX_PLANES];
} kvc_page_shape_t;

/* Engine pointer table entries for a format and shape: kvc_format_ptr_count(format, shape->nl),
 * and for format 17 num_planes * nl (plane p of layer l at l * num_planes + p); -1 if invalid. */
KVC_API int64_t kvc_shape_ptr_count(int format, const kvc_page_shape_t *shape);

/* Per-token multi-layer transfer (LMCache multi_layer_kv_transfer; its _unilateral variant is
 * format 4 with the 2*NL K/V buffers, or an MLA format). Every format 0-17 is accepted with its
 * real geometry: format 0 means the cross-layer tensor here too (one pointer).
 * For t in [skip_prefix_tokens, num_tokens) with s = slots[t] >= 0, every layer l and plane p:
 *   chunk[p, l, t, :] <-> engine row of slot s (block s / bs, offset s % bs) of layer l, plane p.
 * Slots < 0 and rows t < skip_prefix_tokens are untouched in both directions. Slots of the skipped
 * prefix are not read. Formats 14 and 17 have one chunk plane whose row is made of pieces stored
 * apart in the engine (14: values, then the 4-byte scale; 17: the planes in order), and with a
 * device-resident slot or block id table they are KVC_ERR_UNSUPPORTED (docs/TRANSFER.md). */
typedef struct kvc_token_transfer {
    kvc_format_t format;
    kvc_direction_t direction;
    kvc_page_shape_t shape;
    void *const *engine_ptrs;        /* kvc_format_ptr_count(format, nl) base addresses */
    int64_t num_engine_ptrs;
    void *chunk;                     /* [planes, NL, num_tokens, row]; may be NULL when T == 0 */
    kvc_chunk_layout_t chunk_layout; /* KVC_CHUNK_DEFAULT unless a fused format is split */
    int64_t num_tokens;              /* T: token rows of the chunk */
    const void *slots;               /* T entries; may be NULL when T == 0. Host or, on a GPU
                                        context, device memory (checked on the device) */
    kvc_index_type_t slot_type;      /* must be KVC_INDEX_INT64 */
    int64_t num_slots;               /* must equal num_tokens */
    int64_t skip_prefix_tokens;      /* in [0, T] */
    kvc_stream_t stream;             /* GPU backends; ignored by the CPU backend */
} kvc_token_transfer_t;

/* Per-block multi-layer transfer (LMCache multi_layer_block_kv_transfer). The blocks listed in
 * block_ids fill consecutive objects of chunk_tokens tokens each: bpo = chunk_tokens / bs blocks
 * per object, flat index f -> object f / bpo, token rows [(f % bpo)*bs, +bs). num_objects must be
 * ceil(num_block_ids / bpo), so the last object may be partial (its tail rows are untouched).
 * Blocks f < skip_prefix_blocks (and their object rows) are untouched and their ids not read.
 * Each object is [planes, NL, chunk_tokens, row]. */
typedef struct kvc_block_transfer {
    kvc_format_t format;
    kvc_direction_t direction;
    kvc_page_shape_t shape;
    void *const *engine_ptrs;
    int64_t num_engine_ptrs;
    void *const *objects; /* num_objects chunk base addresses */
    int64_t num_objects;
    kvc_chunk_layout_t chunk_layout;
    int64_t chunk_tokens; /* C (LMCache lmcache_chunk_size): > 0 and a multiple of bs */
    const void *block_ids;          /* host or, on a GPU context, device memory (checked on the device) */
    kvc_index_type_t block_id_type; /* must be KVC_INDEX_INT64 */
    int64_t num_block_ids;
    int64_t skip_prefix_blocks; /* in [0, num_block_ids] */
    kvc_stream_t stream;
} kvc_block_transfer_t;

/* Single-layer transfer (LMCache single_layer_kv_transfer, and _sgl with format 9 or 4 and the
 * two pointers {K, V}). shape.nl must be 1; cross-layer formats have no single-layer form. The
 * chunk is [planes, T, row] (plane-major) or [T, planes, row] (token_major); MLA [T, HS]. */
typedef struct kvc_layer_transfer {
    kvc_format_t format;
    kvc_direction_t direction;
    kvc_page_shape_t shape;
    void *const *engine_ptrs; /* 1 pointer, or 2 ({K, V}) for formats 4 and 9 */
    int64_t num_engine_ptrs;
    void *chunk;
    kvc_chunk_layout_t chunk_layout;
    int32_t token_major;
    int64_t num_tokens;
    const void *slots;
    kvc_index_type_t slot_type;
    int64_t num_slots; /* must equal num_tokens */
    kvc_stream_t stream;
} kvc_layer_transfer_t;

/* The flash pair (LMCache load_and_reshape_flash / reshape_and_cache_back_flash): one layer of a
 * [2, NL, T, NH*HS] chunk against separate K and V caches [NB, BS, NH, HS]. Unlike LMCache's
 * fallback, negative slots are skipped. shape: kv_size 2, nl = NL of the chunk. */
typedef struct kvc_flash_transfer {
    kvc_page_shape_t shape;
    void *key_value; /* [2, NL, num_tokens, NH*HS] */
    int64_t num_tokens;
    void *key_cache;
    void *value_cache;
    const void *slots;
    kvc_index_type_t slot_type;
    int64_t num_slots; /* must equal num_tokens */
    int64_t layer_idx; /* in [0, NL) */
    kvc_stream_t stream;
} kvc_flash_transfer_t;

KVC_API kvc_status_t kvc_transfer_tokens(kvc_context_t *ctx, const kvc_token_transfer_t *args);
KVC_API kvc_status_t kvc_transfer_blocks(kvc_context_t *ctx, const kvc_block_transfer_t *args);
KVC_API kvc_status_t kvc_transfer_layer(kvc_context_t *ctx, const kvc_layer_transfer_t *args);
/* D2H: key_value[:, layer_idx, t] <- key_cache / value_cache at slots[t] (slots < 0 skipped). */
KVC_API kvc_status_t kvc_load_and_reshape_flash(kvc_context_t *ctx, const kvc_flash_transfer_t *args);
/* H2D: the inverse. */
KVC_API kvc_status_t kvc_reshape_and_cache_back_flash(kvc_context_t *ctx, const kvc_flash_transfer_t *args);

#ifdef __cplusplus
}
#endif
#endif
