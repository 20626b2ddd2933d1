/* SPDX-License-Identifier: BSD-3-Clause */
/* Engine formats expanded into explicit byte-stride maps (the one place that knows the shapes of
 * kvc_format_t), and the run shapes the copy engines iterate. */
#ifndef KVC_CORE_LAYOUT_H
#define KVC_CORE_LAYOUT_H

#include <kvcore/backend.h>

#include "common/checked.h"

/* A piece of every chunk row stored apart in the engine (formats 14 and 17): its own map, run
 * length and place in the row. A plan moves one part; an op runs one plan per part. */
#define KVC_LAYOUT_MAX_PARTS KVC_MAX_PLANES
typedef struct kvc_layout_part {
    kvc_engine_map_t engine; /* ptrs left NULL */
    int64_t ptr_first;       /* first pointer table entry it uses (17: its plane) */
    int64_t ptr_shift;       /* bytes added to every engine pointer (14: the scale area of a block) */
    int64_t chunk_offset;    /* bytes from the start of a chunk row */
    int64_t bytes;           /* bytes of one token's piece */
    int64_t tensor_bytes;    /* bytes of each engine tensor holding this part */
} kvc_layout_part_t;

typedef struct kvc_layout {
    kvc_engine_map_t engine; /* ptrs left NULL: the op fills them in */
    int64_t planes;          /* planes of the chunk side (2 for K/V, 1 for MLA and fused-packed) */
    int64_t heads;
    int64_t head_bytes; /* bytes of one head of one plane, as the chunk stores it */
    int64_t row_bytes;  /* one token of one plane on the chunk side: heads * head_bytes */
    int64_t ptr_count;  /* pointer table entries the format needs */
    int64_t block_pad;  /* bytes of a padded block step past the block's content (block_stride_elems >
                         * bs*nh*hs); the last block's is not part of its tensor (it may be another
                         * layer's page, or past the pool) */
    int interleaved;    /* chunk side [NL, planes, T, row] (KVC_CHUNK_INTERLEAVED_KV), else [planes, NL, T, row] */
    int nparts;         /* 1, or the pieces of a row (14: 2, 17: num_planes); parts used when > 1 */
    kvc_layout_part_t part[KVC_LAYOUT_MAX_PARTS];
} kvc_layout_t;

/* Part i of a multi-part layout as a one-head layout of its own (engine, head and row = the piece). */
kvc_layout_t kvc_layout_part_view(const kvc_layout_t *l, int i);

/* Validate (format, shape, chunk layout) and expand them. Errors: KVC_ERR_FORMAT (unknown format
 * or a chunk layout the format cannot use), KVC_ERR_DTYPE (element size), KVC_ERR_SHAPE. */
kvc_status_t kvc_layout_build(int format, const kvc_page_shape_t *shape, int chunk_layout, kvc_layout_t *out);

/* Runs of one token (heads) and of one block (tokens x heads) between the engine and a chunk. */
kvc_run_shape_t kvc_layout_token_runs(const kvc_layout_t *l, const kvc_chunk_map_t *c);
kvc_run_shape_t kvc_layout_block_runs(const kvc_layout_t *l, const kvc_chunk_map_t *c);

#endif
