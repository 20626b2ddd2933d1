/* SPDX-License-Identifier: BSD-3-Clause */
/* Addressing of the GPU transfer kernel (transfer.cu) as KVC_HD functions, so tests can walk a
 * plan with the kernel's own arithmetic on the CPU. Work of a plan: per (layer l, plane p), the
 * pairs q = (unit, run) of `count` units (token rows or blocks) times outer_count*inner_count
 * runs per unit; each pair is one contiguous copy of run_words words. */
#ifndef KVC_GPU_TRANSFER_H
#define KVC_GPU_TRANSFER_H

#include <kvcore/transfer.h>

#include "common/hd.h"

typedef struct kvc_xfer_args {
    int h2d;
    int blocks; /* 1: units are blocks (index = block ids), 0: token rows (index = slots, < 0 skipped) */
    int64_t num_layers, num_planes;
    char *const *ptrs; /* engine pointer table */
    int64_t ptr_layer_step, ptr_plane_step, layer_offset, plane_offset;
    int64_t block_stride, token_stride, block_size;
    char *chunk;          /* tokens: the chunk */
    char *const *objects; /* blocks: the object list (absolute object index) */
    int64_t bpo;
    int64_t c_plane, c_layer, c_token;
    const int64_t *index; /* slots / block ids of units [first, first + count), index[0] = unit first */
    int64_t first, count;
    int64_t run_words, word_bytes;
    int64_t outer_count, outer_engine, outer_chunk;
    int64_t inner_count, inner_engine, inner_chunk;
} kvc_xfer_args_t;

/* Pairs per (layer, plane). */
KVC_HD uint64_t kvc_xfer_pairs(const kvc_xfer_args_t *a)
{
    return (uint64_t)a->count * (uint64_t)(a->outer_count * a->inner_count);
}

/* Destination and source of pair q of (l, p); 0 when the unit is skipped (negative slot). */
KVC_HD int kvc_xfer_locate(const kvc_xfer_args_t *a, int64_t l, int64_t p, uint64_t q, char **dst, const char **src)
{
    const uint64_t nruns = (uint64_t)(a->outer_count * a->inner_count);
    uint64_t u = q, r = 0;
    if (nruns > 1) kvc_divmod(q, nruns, &u, &r);
    const int64_t unit = a->first + (int64_t)u, id = a->index[u];
    const int64_t cpl = p * a->c_plane + l * a->c_layer;
    char *e = a->ptrs[l * a->ptr_layer_step + p * a->ptr_plane_step] + l * a->layer_offset + p * a->plane_offset;
    char *c;
    if (a->blocks) {
        uint64_t obj, j;
        kvc_divmod((uint64_t)unit, (uint64_t)a->bpo, &obj, &j);
        e += id * a->block_stride;
        c = a->objects[obj] + cpl + (int64_t)j * a->block_size * a->c_token;
    } else {
        if (id < 0) return 0;
        uint64_t blk, off;
        kvc_divmod((uint64_t)id, (uint64_t)a->block_size, &blk, &off);
        e += (int64_t)blk * a->block_stride + (int64_t)off * a->token_stride;
        c = a->chunk + cpl + unit * a->c_token;
    }
    if (nruns > 1) {
        uint64_t i, j;
        kvc_divmod(r, (uint64_t)a->inner_count, &i, &j);
        e += (int64_t)i * a->outer_engine + (int64_t)j * a->inner_engine;
        c += (int64_t)i * a->outer_chunk + (int64_t)j * a->inner_chunk;
    }
    *dst = a->h2d ? e : c;
    *src = a->h2d ? c : e;
    return 1;
}

/* Widest copy word (16, 8, 4, 2, 1 bytes) that `bits` (every address and stride ORed) allows. */
KVC_HD int kvc_xfer_word_bytes(uint64_t bits)
{
    int w = 16;
    while (w > 1 && (bits & (uint64_t)(w - 1))) w /= 2;
    return w;
}

/* The plan's geometry (pointers, tables and word size are filled in by the caller). */
static inline kvc_xfer_args_t kvc_xfer_from_plan(int direction, int64_t nl, int64_t np, const kvc_engine_map_t *m,
                                                 const kvc_chunk_map_t *cm, const kvc_run_shape_t *r)
{
    kvc_xfer_args_t a;
    memset(&a, 0, sizeof(a));
    a.h2d = direction == KVC_H2D;
    a.num_layers = nl;
    a.num_planes = np;
    a.ptr_layer_step = m->ptr_layer_step;
    a.ptr_plane_step = m->ptr_plane_step;
    a.layer_offset = m->layer_offset;
    a.plane_offset = m->plane_offset;
    a.block_stride = m->block_stride;
    a.token_stride = m->token_stride;
    a.block_size = m->block_size;
    a.c_plane = cm->plane_stride;
    a.c_layer = cm->layer_stride;
    a.c_token = cm->token_stride;
    a.outer_count = r->outer_count;
    a.outer_engine = r->outer_engine;
    a.outer_chunk = r->outer_chunk;
    a.inner_count = r->inner_count;
    a.inner_engine = r->inner_engine;
    a.inner_chunk = r->inner_chunk;
    a.word_bytes = 1;
    a.run_words = r->run_bytes;
    return a;
}

/* Entries of the engine pointer table a plan reads. */
static inline int64_t kvc_xfer_ptr_count(const kvc_xfer_args_t *a)
{
    return (a->num_layers - 1) * a->ptr_layer_step + (a->num_planes - 1) * a->ptr_plane_step + 1;
}

/* Strides ORed: with every base address ORed in, kvc_xfer_word_bytes gives the copy word. */
static inline uint64_t kvc_xfer_stride_bits(const kvc_xfer_args_t *a, int64_t run_bytes)
{
    return (uint64_t)(run_bytes | a->layer_offset | a->plane_offset | a->block_stride | a->token_stride | a->c_plane |
                      a->c_layer | a->c_token | a->outer_engine | a->outer_chunk | a->inner_engine | a->inner_chunk);
}

#endif
