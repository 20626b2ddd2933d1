/* SPDX-License-Identifier: BSD-3-Clause */
/* Public KV transfer ops: validate every argument once, build a plan, hand it to the backend.
 * Nothing is written before validation has passed, so a failed call changes no byte. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvcore/transfer.h>

#include "internal.h"
#include "layout.h"

static kvc_status_t check_direction(int d)
{
    if (d != KVC_H2D && d != KVC_D2H)
        return kvc_error(KVC_ERR_INVALID_ARG, "direction = %d: must be KVC_H2D (0) or KVC_D2H (1)", d);
    return KVC_OK;
}

static kvc_status_t check_ptr_table(const char *what, void *const *ptrs, int64_t n, int64_t want, const char *why)
{
    if (n != want)
        return kvc_error(KVC_ERR_SHAPE, "num_%s = %lld: %s needs %lld", what, (long long)n, why, (long long)want);
    if (n > 0 && !ptrs) return kvc_error(KVC_ERR_INVALID_ARG, "%s is NULL", what);
    for (int64_t i = 0; i < n; i++)
        if (!ptrs[i]) return kvc_error(KVC_ERR_INVALID_ARG, "%s[%lld] is NULL", what, (long long)i);
    return KVC_OK;
}

/* An int64 index list: declared type, non-NULL when non-empty, entries [first, n) < limit (and
 * >= 0 unless negatives mean "skip"). */
/* on_device: a device-resident table (kvc_res_on_device) is checked by the GPU module instead. */
static kvc_status_t check_indices(const char *what, const void *p, int type, int64_t n, int64_t first, int64_t limit,
                                  int negative_skips, const char *limit_name, int on_device)
{
    if (type != KVC_INDEX_INT64)
        return kvc_error(KVC_ERR_DTYPE, "%s: index type %d%s; only KVC_INDEX_INT64 (%d) is accepted", what, type,
                         type == KVC_INDEX_INT32 ? " (int32)" : "", KVC_INDEX_INT64);
    if (n > 0 && !p) return kvc_error(KVC_ERR_INVALID_ARG, "%s is NULL with %lld entries", what, (long long)n);
    const int64_t *v = p;
    for (int64_t i = first; i < n && !on_device; i++) {
        if (v[i] >= limit || (v[i] < 0 && !negative_skips))
            return kvc_error(KVC_ERR_OUT_OF_RANGE, "%s[%lld] = %lld outside [0, %lld) (%s)", what, (long long)i,
                             (long long)v[i], (long long)limit, limit_name);
    }
    return KVC_OK;
}

static kvc_status_t check_skip(const char *what, int64_t skip, int64_t n)
{
    if (skip < 0 || skip > n)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "%s = %lld outside [0, %lld]", what, (long long)skip, (long long)n);
    return KVC_OK;
}

/* Shared by the per-token ops: token count, slot list and chunk size. */
static kvc_status_t check_tokens(const kvc_layout_t *l, const kvc_page_shape_t *s, int64_t planes_times_layers,
                                 int64_t num_tokens, const void *slots, int slot_type, int64_t num_slots, int64_t skip,
                                 int on_device)
{
    if (num_tokens < 0) return kvc_error(KVC_ERR_SHAPE, "num_tokens = %lld is negative", (long long)num_tokens);
    if (num_slots != num_tokens)
        return kvc_error(KVC_ERR_SHAPE, "num_slots = %lld but the chunk has num_tokens = %lld rows", (long long)num_slots,
                         (long long)num_tokens);
    if (kvc_mul3(planes_times_layers, num_tokens, l->row_bytes) < 0)
        return kvc_error(KVC_ERR_SHAPE, "chunk of %lld tokens overflows 64-bit byte offsets", (long long)num_tokens);
    kvc_status_t st = check_skip("skip_prefix_tokens", skip, num_tokens);
    if (st != KVC_OK) return st;
    return check_indices("slots", slots, slot_type, num_slots, skip, s->nb * s->bs, 1, "nb*bs slots", on_device);
}

/* Engine tensors, chunk and objects decide the side (residence.c), and a device-resident index
 * table (host tables are read by the core and go with any side). A GPU module checks each pointer
 * again and refuses pageable host memory. nptrs: the engine pointers the call reads. */
static kvc_status_t route_xfer(kvc_context_t *ctx, const char *op, void *const *ptrs, int64_t nptrs, void *chunk,
                               void *const *objects, int64_t num_objects, const char *table_name,
                               const void *device_table, kvc_route_t *to)
{
    kvc_residence_t r;
    kvc_res_init(&r, ctx, op);
    kvc_res_add(&r, table_name, -1, device_table);
    for (int64_t i = 0; i < nptrs; i++) kvc_res_add(&r, "engine_ptrs", i, ptrs[i]);
    kvc_res_add(&r, "chunk", -1, chunk);
    for (int64_t i = 0; i < num_objects; i++) kvc_res_add(&r, "objects", i, objects[i]);
    return kvc_res_route(&r, to);
}

/* Engine pointers a plan reads: those of its layers and planes. */
static int64_t plan_ptrs(const kvc_engine_map_t *e, int64_t layers, int64_t planes)
{
    return (layers - 1) * e->ptr_layer_step + (planes - 1) * e->ptr_plane_step + 1;
}

/* The engine tensors as byte ranges, and their hull (one test rejects most host buffers). Every
 * pointer's tensor is [NB, block] (or [2, NB, block] for the two-major formats) with the block
 * step the layout resolved, up to the last block's content: its padding is not the tensor's (a
 * layer view pool[:, l] of a blocks-first pool has the next layers' pages there, or the end of
 * the pool, where a host buffer may well be). */
typedef struct {
    void *const *ptrs;
    int64_t n, bytes;
    const kvc_layout_t *l; /* format 17: entry i holds plane i % nparts, of its own size */
    uintptr_t lo, hi;
} pool_t;

static int64_t pool_bytes(const pool_t *p, int64_t i)
{
    return p->l ? p->l->part[i % p->l->nparts].tensor_bytes : p->bytes;
}

static pool_t pool_of(int format, const kvc_layout_t *l, int64_t nb, void *const *ptrs, int64_t n)
{
    pool_t p = { ptrs, n, nb * l->engine.block_stride * (kvc_format_is_two_major(format) ? 2 : 1) - l->block_pad,
                 format == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS ? l : NULL, UINTPTR_MAX, 0 };
    for (int64_t i = 0; i < n; i++) {
        const uintptr_t a = (uintptr_t)ptrs[i];
        if (a < p.lo) p.lo = a;
        if (a + (uintptr_t)pool_bytes(&p, i) > p.hi) p.hi = a + (uintptr_t)pool_bytes(&p, i);
    }
    return p;
}

/* A host-side buffer overlapping an engine tensor would be read and written by the same copy (the
 * result depends on the copy order): KVC_ERR_OVERLAP. Range intersections only, never elements. */
static kvc_status_t check_overlap(const pool_t *p, const char *what, int64_t index, const void *buf, int64_t bytes)
{
    const uintptr_t b0 = (uintptr_t)buf, b1 = b0 + (uintptr_t)bytes;
    if (bytes <= 0 || b1 <= p->lo || b0 >= p->hi) return KVC_OK;
    for (int64_t i = 0; i < p->n; i++) {
        const uintptr_t e0 = (uintptr_t)p->ptrs[i], e1 = e0 + (uintptr_t)pool_bytes(p, i);
        if (b0 < e1 && e0 < b1) {
            char name[48];
            if (index >= 0) snprintf(name, sizeof(name), "%s[%lld]", what, (long long)index);
            else snprintf(name, sizeof(name), "%s", what);
            return kvc_error(KVC_ERR_OVERLAP, "%s [%p, +%lld bytes) overlaps engine tensor %lld [%p, +%lld bytes)", name,
                             buf, (long long)bytes, (long long)i, p->ptrs[i], (long long)pool_bytes(p, i));
        }
    }
    return KVC_OK;
}

/* The tables each part of a multi-part row (formats 14, 17) reads: a slice of the caller's engine
 * pointer table, or a copy with every entry moved to the part's area (14's scales), and the object
 * list with every entry moved to the part's column. All are made before the first part runs, so a
 * failed allocation writes nothing. Backends read host tables during the call only. */
typedef struct {
    void *const *ptrs[KVC_LAYOUT_MAX_PARTS], *const *objs[KVC_LAYOUT_MAX_PARTS];
    void **owned[2 * KVC_LAYOUT_MAX_PARTS];
} part_tables_t;

static void part_tables_free(part_tables_t *t)
{
    for (int i = 0; i < 2 * KVC_LAYOUT_MAX_PARTS; i++) free(t->owned[i]);
}

static void *const *shifted(void *const *table, int64_t n, int64_t shift, void ***owned)
{
    if (!shift || n <= 0) return table;
    void **t = malloc((size_t)n * sizeof(void *));
    if (t)
        for (int64_t i = 0; i < n; i++) t[i] = (char *)table[i] + shift;
    *owned = t;
    return t;
}

static kvc_status_t part_tables(const kvc_layout_t *l, void *const *ptrs, void *const *objs, int64_t nobj,
                                part_tables_t *t)
{
    *t = (part_tables_t){ 0 };
    for (int i = 0; i < l->nparts; i++) {
        const kvc_layout_part_t *pt = &l->part[i];
        t->ptrs[i] = shifted(ptrs + pt->ptr_first, l->ptr_count - pt->ptr_first, pt->ptr_shift, &t->owned[2 * i]);
        t->objs[i] = objs ? shifted(objs, nobj, pt->chunk_offset, &t->owned[2 * i + 1]) : NULL;
        if (!t->ptrs[i] || (objs && !t->objs[i])) {
            part_tables_free(t);
            *t = (part_tables_t){ 0 };
            return kvc_error(KVC_ERR_NO_MEMORY, "no memory for the address tables of a %d-part row", l->nparts);
        }
    }
    return KVC_OK;
}

/* Formats whose rows are several parts run one backend call per part; each call would check a
 * device-resident index table on its own and report a bad entry once per part. */
static kvc_status_t check_parts_index(const kvc_layout_t *l, int on_device, const char *what, int format)
{
    if (l->nparts > 1 && on_device)
        return kvc_error(KVC_ERR_UNSUPPORTED, "%s in device memory with format %s: its rows are %d parts moved by "
                                              "separate launches; pass a host %s table",
                         what, kvc_format_name(format), l->nparts, what);
    return KVC_OK;
}

static struct kvc_token_plan token_plan(const kvc_layout_t *l, int direction, int64_t layers, void *const *ptrs,
                                        void *chunk, kvc_chunk_map_t cmap, const void *slots, int64_t skip,
                                        int64_t num_tokens, int64_t device_slot_limit, kvc_stream_t stream)
{
    struct kvc_token_plan p = { .direction = direction,
                                .num_layers = layers,
                                .num_planes = l->planes,
                                .engine = l->engine,
                                .chunk = chunk,
                                .chunk_map = cmap,
                                .slots = slots,
                                .first_token = skip,
                                .end_token = num_tokens,
                                .runs = kvc_layout_token_runs(l, &cmap),
                                .bytes = kvc_mul3(layers * l->planes, num_tokens - skip, l->row_bytes),
                                .stream = stream,
                                .index_on_device = device_slot_limit > 0,
                                .index_limit = device_slot_limit };
    p.engine.ptrs = ptrs;
    return p;
}

static kvc_status_t run_token_plan(kvc_context_t *ctx, const struct kvc_token_plan *p)
{
    kvc_route_t to;
    const kvc_status_t st = route_xfer(ctx, "transfer", p->engine.ptrs, plan_ptrs(&p->engine, p->num_layers, p->num_planes),
                                       p->chunk, NULL, 0, "slots", p->index_on_device ? p->slots : NULL, &to);
    if (st != KVC_OK) return st;
    return to.ops->transfer_tokens(to.b, p);
}

/* Engine pointers of `layers` layers of a multi-part row: every part's tables are slices of the
 * caller's (17: a layer's planes are ptrs[l*np, l*np + np)) or shifted copies of it (14). */
static int64_t row_ptrs(const kvc_layout_t *l, int64_t layers) { return layers * l->engine.ptr_layer_step; }

/* The parts of a multi-part row for the transfer_*_parts slots, each with its own pointer table. */
static struct kvc_row_parts row_parts(const kvc_layout_t *l, const part_tables_t *t)
{
    struct kvc_row_parts rp = { .count = l->nparts };
    for (int i = 0; i < l->nparts; i++) {
        rp.part[i] = (struct kvc_row_part){ .engine = l->part[i].engine, .chunk_offset = l->part[i].chunk_offset,
                                            .bytes = l->part[i].bytes };
        rp.part[i].engine.ptrs = t->ptrs[i];
    }
    return rp;
}

/* One plan, or for a multi-part row (formats 14, 17) one call carrying every part when the backend
 * has the transfer_tokens_parts slot, else one plan per part in row order. */
static kvc_status_t run_tokens(kvc_context_t *ctx, const kvc_layout_t *l, int direction, int64_t layers,
                               void *const *ptrs, void *chunk, kvc_chunk_map_t cmap, const void *slots, int64_t skip,
                               int64_t num_tokens, int64_t device_slot_limit, kvc_stream_t stream)
{
    if (skip == num_tokens) return KVC_OK;
    if (l->nparts == 1) {
        const struct kvc_token_plan p =
            token_plan(l, direction, layers, ptrs, chunk, cmap, slots, skip, num_tokens, device_slot_limit, stream);
        return run_token_plan(ctx, &p);
    }
    kvc_route_t to;
    kvc_status_t st = route_xfer(ctx, "transfer", ptrs, row_ptrs(l, layers), chunk, NULL, 0, "slots",
                                 device_slot_limit > 0 ? slots : NULL, &to);
    part_tables_t t;
    if (st != KVC_OK || (st = part_tables(l, ptrs, NULL, 0, &t)) != KVC_OK) return st;
    if (kvc_ops_have_parts(to.ops)) {
        const struct kvc_row_parts rp = row_parts(l, &t);
        struct kvc_token_plan p =
            token_plan(l, direction, layers, ptrs, chunk, cmap, slots, skip, num_tokens, device_slot_limit, stream);
        p.engine = rp.part[0].engine;
        st = to.ops->transfer_tokens_parts(to.b, &p, &rp);
    } else {
        for (int i = 0; i < l->nparts && st == KVC_OK; i++) {
            const kvc_layout_t v = kvc_layout_part_view(l, i);
            kvc_chunk_map_t c = cmap;
            c.head_stride = l->part[i].bytes;
            const struct kvc_token_plan p = token_plan(&v, direction, layers, t.ptrs[i], (char *)chunk + l->part[i].chunk_offset,
                                                       c, slots, skip, num_tokens, device_slot_limit, stream);
            st = to.ops->transfer_tokens(to.b, &p);
        }
    }
    part_tables_free(&t);
    return st;
}

/* The chunk (or object) of nl layers x rows tokens: [planes, NL, rows, row] or, interleaved,
 * [NL, planes, rows, row]. */
static kvc_chunk_map_t chunk_map(const kvc_layout_t *l, int64_t nl, int64_t rows)
{
    const int64_t plane = rows * l->row_bytes;
    return (kvc_chunk_map_t){ .plane_stride = l->interleaved ? plane : nl * plane,
                              .layer_stride = l->interleaved ? l->planes * plane : plane,
                              .token_stride = l->row_bytes,
                              .head_stride = l->head_bytes };
}

/* Validates a per-token transfer whose chunk holds chunk_rows (>= num_tokens) rows per layer and
 * plane: its layout, chunk map and whether the slots are device memory. */
static kvc_status_t tokens_check(kvc_context_t *ctx, const kvc_token_transfer_t *a, int64_t chunk_rows,
                                 kvc_layout_t *lo, kvc_chunk_map_t *cmap, int *on_device)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and args must not be NULL");
    kvc_status_t st = check_direction(a->direction);
    if (st != KVC_OK) return st;
    kvc_layout_t l;
    if ((st = kvc_layout_build(a->format, &a->shape, a->chunk_layout, &l)) != KVC_OK) return st;
    if ((st = check_ptr_table("engine_ptrs", a->engine_ptrs, a->num_engine_ptrs, l.ptr_count,
                              kvc_format_name(a->format))) != KVC_OK)
        return st;
    const int64_t T = a->num_tokens, R = chunk_rows;
    if (!a->chunk && T > 0) return kvc_error(KVC_ERR_INVALID_ARG, "chunk is NULL");
    const int dev = kvc_res_on_device(ctx, a->slots);
    if ((st = check_tokens(&l, &a->shape, l.planes * a->shape.nl, T, a->slots, a->slot_type, a->num_slots,
                           a->skip_prefix_tokens, dev)) != KVC_OK)
        return st;
    if ((st = check_parts_index(&l, dev, "slots", a->format)) != KVC_OK) return st;
    if (R < T || kvc_mul3(l.planes * a->shape.nl, R, l.row_bytes) < 0)
        return kvc_error(KVC_ERR_SHAPE, "chunk of %lld rows per layer for %lld tokens", (long long)R, (long long)T);
    const pool_t pool = pool_of(a->format, &l, a->shape.nb, a->engine_ptrs, a->num_engine_ptrs);
    if ((st = check_overlap(&pool, "chunk", -1, a->chunk, kvc_mul3(l.planes * a->shape.nl, R, l.row_bytes))) != KVC_OK)
        return st;
    *cmap = chunk_map(&l, a->shape.nl, R);
    *lo = l;
    *on_device = dev;
    return KVC_OK;
}

/* Plans (plan.c) take one backend plan per transfer: formats whose rows are several parts are
 * refused there. */
static kvc_status_t single_part(const kvc_layout_t *l, int format)
{
    if (l->nparts > 1)
        return kvc_error(KVC_ERR_UNSUPPORTED, "format %s in a plan: its rows are %d parts, one launch each; use "
                                              "kvc_transfer_tokens / kvc_transfer_blocks",
                         kvc_format_name(format), l->nparts);
    return KVC_OK;
}

kvc_status_t kvc_tokens_prepare(kvc_context_t *ctx, const kvc_token_transfer_t *a, int64_t chunk_rows,
                                struct kvc_token_plan *p, int *empty)
{
    kvc_layout_t l;
    kvc_chunk_map_t c;
    int dev = 0;
    kvc_status_t st = tokens_check(ctx, a, chunk_rows, &l, &c, &dev);
    if (st == KVC_OK) st = single_part(&l, a->format);
    if (st != KVC_OK) return st;
    const int64_t T = a->num_tokens;
    *empty = a->skip_prefix_tokens == T;
    *p = token_plan(&l, a->direction, a->shape.nl, a->engine_ptrs, a->chunk, c, a->slots, a->skip_prefix_tokens, T,
                    dev ? a->shape.nb * a->shape.bs : 0, a->stream);
    return KVC_OK;
}

KVC_API kvc_status_t kvc_transfer_tokens(kvc_context_t *ctx, const kvc_token_transfer_t *a)
{
    kvc_layout_t l;
    kvc_chunk_map_t c;
    int dev = 0;
    const kvc_status_t st = tokens_check(ctx, a, a ? a->num_tokens : 0, &l, &c, &dev);
    if (st != KVC_OK) return st;
    return run_tokens(ctx, &l, a->direction, a->shape.nl, a->engine_ptrs, a->chunk, c, a->slots, a->skip_prefix_tokens,
                      a->num_tokens, dev ? a->shape.nb * a->shape.bs : 0, a->stream);
}

KVC_API kvc_status_t kvc_transfer_layer(kvc_context_t *ctx, const kvc_layer_transfer_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and args must not be NULL");
    kvc_status_t st = check_direction(a->direction);
    if (st != KVC_OK) return st;
    if (kvc_format_is_cross_layer(a->format))
        return kvc_error(KVC_ERR_FORMAT, "format %s holds every layer in one tensor; use kvc_transfer_tokens",
                         kvc_format_name(a->format));
    kvc_layout_t l;
    if ((st = kvc_layout_build(a->format, &a->shape, a->chunk_layout, &l)) != KVC_OK) return st;
    if (a->shape.nl != 1)
        return kvc_error(KVC_ERR_SHAPE, "shape.nl = %lld: a single-layer transfer needs nl = 1", (long long)a->shape.nl);
    if ((st = check_ptr_table("engine_ptrs", a->engine_ptrs, a->num_engine_ptrs, l.ptr_count,
                              kvc_format_name(a->format))) != KVC_OK)
        return st;
    const int64_t T = a->num_tokens;
    if (!a->chunk && T > 0) return kvc_error(KVC_ERR_INVALID_ARG, "chunk is NULL");
    const int dev = kvc_res_on_device(ctx, a->slots);
    if ((st = check_tokens(&l, &a->shape, l.planes, T, a->slots, a->slot_type, a->num_slots, 0, dev)) != KVC_OK)
        return st;
    if ((st = check_parts_index(&l, dev, "slots", a->format)) != KVC_OK) return st;
    const pool_t pool = pool_of(a->format, &l, a->shape.nb, a->engine_ptrs, a->num_engine_ptrs);
    if ((st = check_overlap(&pool, "chunk", -1, a->chunk, kvc_mul3(l.planes, T, l.row_bytes))) != KVC_OK) return st;
    const kvc_chunk_map_t c = { .plane_stride = a->token_major ? l.row_bytes : T * l.row_bytes,
                                .token_stride = a->token_major ? l.planes * l.row_bytes : l.row_bytes,
                                .head_stride = l.head_bytes };
    return run_tokens(ctx, &l, a->direction, 1, a->engine_ptrs, a->chunk, c, a->slots, 0, T, dev ? a->shape.nb * a->shape.bs : 0,
                      a->stream);
}

static kvc_status_t flash(kvc_context_t *ctx, const kvc_flash_transfer_t *a, int direction)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and args must not be NULL");
    /* One layer of separate K and V caches [NB, BS, NH, HS] is format 9 with nl = 1. */
    kvc_page_shape_t one = a->shape;
    one.nl = 1;
    kvc_layout_t l;
    kvc_status_t st = kvc_layout_build(KVC_FMT_TWO_X_NL_X_NB_BS_NH_HS, &one, KVC_CHUNK_DEFAULT, &l);
    if (st != KVC_OK) return st;
    if (a->shape.nl < 1 || kvc_mul2(2, a->shape.nl) < 0) /* 2*nl: the chunk's planes x layers, below */
        return kvc_error(KVC_ERR_SHAPE, "shape.nl = %lld must be >= 1 and 2*nl fit 64 bits", (long long)a->shape.nl);
    if (!a->key_value || !a->key_cache || !a->value_cache)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s is NULL",
                         !a->key_value ? "key_value" : !a->key_cache ? "key_cache" : "value_cache");
    const int64_t T = a->num_tokens;
    const int dev = kvc_res_on_device(ctx, a->slots);
    if ((st = check_tokens(&l, &one, 2 * a->shape.nl, T, a->slots, a->slot_type, a->num_slots, 0, dev)) != KVC_OK)
        return st;
    if (a->layer_idx < 0 || a->layer_idx >= a->shape.nl)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "layer_idx = %lld outside [0, %lld)", (long long)a->layer_idx,
                         (long long)a->shape.nl);
    void *const ptrs[2] = { a->key_cache, a->value_cache };
    const pool_t pool = pool_of(KVC_FMT_TWO_X_NL_X_NB_BS_NH_HS, &l, a->shape.nb, ptrs, 2);
    if ((st = check_overlap(&pool, "key_value", -1, a->key_value, kvc_mul3(2 * a->shape.nl, T, l.row_bytes))) != KVC_OK)
        return st;
    const kvc_chunk_map_t c = { .plane_stride = a->shape.nl * T * l.row_bytes,
                                .token_stride = l.row_bytes,
                                .head_stride = l.head_bytes };
    char *chunk = (char *)a->key_value + a->layer_idx * T * l.row_bytes;
    return run_tokens(ctx, &l, direction, 1, ptrs, chunk, c, a->slots, 0, T, dev ? one.nb * one.bs : 0, a->stream);
}

KVC_API kvc_status_t kvc_load_and_reshape_flash(kvc_context_t *ctx, const kvc_flash_transfer_t *a)
{
    return flash(ctx, a, KVC_D2H);
}

KVC_API kvc_status_t kvc_reshape_and_cache_back_flash(kvc_context_t *ctx, const kvc_flash_transfer_t *a)
{
    return flash(ctx, a, KVC_H2D);
}

/* Validates a block transfer: its layout, chunk map and whether the block ids are device memory. */
static kvc_status_t blocks_check(kvc_context_t *ctx, const kvc_block_transfer_t *a, kvc_layout_t *lo,
                                 kvc_chunk_map_t *cmap, int *on_device)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and args must not be NULL");
    kvc_status_t st = check_direction(a->direction);
    if (st != KVC_OK) return st;
    kvc_layout_t l;
    if ((st = kvc_layout_build(a->format, &a->shape, a->chunk_layout, &l)) != KVC_OK) return st;
    if ((st = check_ptr_table("engine_ptrs", a->engine_ptrs, a->num_engine_ptrs, l.ptr_count,
                              kvc_format_name(a->format))) != KVC_OK)
        return st;
    const int64_t C = a->chunk_tokens, bs = a->shape.bs, n = a->num_block_ids;
    if (C <= 0 || C % bs)
        return kvc_error(KVC_ERR_SHAPE, "chunk_tokens = %lld: must be a positive multiple of the block size %lld",
                         (long long)C, (long long)bs);
    if (kvc_mul3(l.planes * a->shape.nl, C, l.row_bytes) < 0)
        return kvc_error(KVC_ERR_SHAPE, "chunk of %lld tokens overflows 64-bit byte offsets", (long long)C);
    if (n < 0) return kvc_error(KVC_ERR_SHAPE, "num_block_ids = %lld is negative", (long long)n);
    const int64_t bpo = C / bs, want_objects = n / bpo + (n % bpo != 0);
    char why[96];
    snprintf(why, sizeof(why), "%lld block ids at %lld blocks per object", (long long)n, (long long)bpo);
    if ((st = check_ptr_table("objects", a->objects, a->num_objects, want_objects, why)) != KVC_OK) return st;
    if ((st = check_skip("skip_prefix_blocks", a->skip_prefix_blocks, n)) != KVC_OK) return st;
    const int dev = kvc_res_on_device(ctx, a->block_ids);
    if ((st = check_indices("block_ids", a->block_ids, a->block_id_type, n, a->skip_prefix_blocks, a->shape.nb, 0,
                            "nb blocks", dev)) != KVC_OK)
        return st;
    if ((st = check_parts_index(&l, dev, "block_ids", a->format)) != KVC_OK) return st;
    const pool_t pool = pool_of(a->format, &l, a->shape.nb, a->engine_ptrs, a->num_engine_ptrs);
    const int64_t object_bytes = kvc_mul3(l.planes * a->shape.nl, C, l.row_bytes);
    for (int64_t i = 0; i < a->num_objects; i++)
        if ((st = check_overlap(&pool, "objects", i, a->objects[i], object_bytes)) != KVC_OK) return st;
    *cmap = chunk_map(&l, a->shape.nl, C);
    *lo = l;
    *on_device = dev;
    return KVC_OK;
}

static struct kvc_block_plan block_plan(const kvc_block_transfer_t *a, const kvc_layout_t *l, void *const *ptrs,
                                        void *const *objects, kvc_chunk_map_t c, int dev)
{
    const int64_t n = a->num_block_ids;
    struct kvc_block_plan p = { .direction = a->direction,
                                .num_layers = a->shape.nl,
                                .num_planes = l->planes,
                                .engine = l->engine,
                                .objects = objects,
                                .blocks_per_object = a->chunk_tokens / a->shape.bs,
                                .chunk_map = c,
                                .block_ids = a->block_ids,
                                .first_block = a->skip_prefix_blocks,
                                .end_block = n,
                                .runs = kvc_layout_block_runs(l, &c),
                                .bytes = kvc_mul3(a->shape.nl * l->planes, (n - a->skip_prefix_blocks) * a->shape.bs,
                                                  l->row_bytes),
                                .stream = a->stream,
                                .index_on_device = dev,
                                .index_limit = a->shape.nb };
    p.engine.ptrs = ptrs;
    return p;
}

/* Validates a block transfer and fills *p; *empty when nothing moves. */
kvc_status_t kvc_blocks_prepare(kvc_context_t *ctx, const kvc_block_transfer_t *a, struct kvc_block_plan *p, int *empty)
{
    kvc_layout_t l;
    kvc_chunk_map_t c;
    int dev = 0;
    kvc_status_t st = blocks_check(ctx, a, &l, &c, &dev);
    if (st == KVC_OK) st = single_part(&l, a->format);
    if (st != KVC_OK) return st;
    *empty = a->skip_prefix_blocks == a->num_block_ids;
    *p = block_plan(a, &l, a->engine_ptrs, a->objects, c, dev);
    return KVC_OK;
}

/* nptrs: the engine pointers the call reads. */
static kvc_status_t route_blocks(kvc_context_t *ctx, const struct kvc_block_plan *p, int64_t nptrs, kvc_route_t *to)
{
    return route_xfer(ctx, "transfer_blocks", p->engine.ptrs, nptrs, NULL,
                      p->objects, (p->end_block - 1) / p->blocks_per_object + 1, "block_ids",
                      p->index_on_device ? p->block_ids : NULL, to);
}

/* Formats 14, 17: p is the plan of the whole row (layout l); one call carrying every part when the
 * backend has the transfer_blocks_parts slot, else one plan per part in row order. */
static kvc_status_t run_block_parts(kvc_context_t *ctx, const struct kvc_block_plan *p, const kvc_layout_t *l)
{
    kvc_route_t to;
    kvc_status_t st = route_blocks(ctx, p, row_ptrs(l, p->num_layers), &to);
    if (st != KVC_OK) return st;
    const int have = kvc_ops_have_parts(to.ops);
    const int64_t nobj = (p->end_block - 1) / p->blocks_per_object + 1;
    part_tables_t t;
    if ((st = part_tables(l, p->engine.ptrs, have ? NULL : p->objects, nobj, &t)) != KVC_OK) return st;
    if (have) {
        const struct kvc_row_parts rp = row_parts(l, &t);
        struct kvc_block_plan q = *p;
        q.engine = rp.part[0].engine;
        st = to.ops->transfer_blocks_parts(to.b, &q, &rp);
    } else {
        for (int i = 0; i < l->nparts && st == KVC_OK; i++) {
            const kvc_layout_t v = kvc_layout_part_view(l, i);
            struct kvc_block_plan q = *p;
            q.engine = v.engine;
            q.engine.ptrs = t.ptrs[i];
            q.objects = t.objs[i];
            q.chunk_map.head_stride = l->part[i].bytes;
            q.runs = kvc_layout_block_runs(&v, &q.chunk_map);
            q.bytes = p->bytes / l->row_bytes * l->part[i].bytes;
            st = to.ops->transfer_blocks(to.b, &q);
        }
    }
    part_tables_free(&t);
    return st;
}

KVC_API kvc_status_t kvc_transfer_blocks(kvc_context_t *ctx, const kvc_block_transfer_t *a)
{
    kvc_layout_t l;
    kvc_chunk_map_t c;
    int dev = 0;
    kvc_status_t st = blocks_check(ctx, a, &l, &c, &dev);
    if (st != KVC_OK || a->skip_prefix_blocks == a->num_block_ids) return st;
    const struct kvc_block_plan p = block_plan(a, &l, a->engine_ptrs, a->objects, c, dev);
    if (l.nparts > 1) return run_block_parts(ctx, &p, &l);
    kvc_route_t to;
    if ((st = route_blocks(ctx, &p, plan_ptrs(&p.engine, p.num_layers, p.num_planes), &to)) != KVC_OK) return st;
    return to.ops->transfer_blocks(to.b, &p);
}
