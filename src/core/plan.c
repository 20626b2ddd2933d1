/* SPDX-License-Identifier: BSD-3-Clause */
/* Plans (plan.h): validate the whole plan, resolve it into one ordered list of backend ops (each
 * checked by the single call's own validation), route the list once by where its buffers live,
 * and hand it to the backend's run_plan slot. Nothing runs before the last op has been checked. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/plan.h>

#include "internal.h"
#include "layout.h"

/* Prefix the message of a failed check with where in the plan it failed. */
static kvc_status_t at(kvc_status_t st, const char *fmt, ...)
{
    char msg[512], pre[128];
    snprintf(msg, sizeof(msg), "%s", kvc_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    return kvc_error(st, "%s: %s", pre, msg);
}

static kvc_status_t check_alignment(size_t a)
{
    if (a == 0 || (a & (a - 1)))
        return kvc_error(KVC_ERR_INVALID_ARG, "host_buffer_alignment %zu is not a power of two > 0", a);
    return KVC_OK;
}

static kvc_status_t check_array(const char *what, const void *p, int64_t n)
{
    if (n < 0) return kvc_error(KVC_ERR_INVALID_ARG, "num_%s = %lld is negative", what, (long long)n);
    if (n > 0 && !p) return kvc_error(KVC_ERR_INVALID_ARG, "%s is NULL with %lld entries", what, (long long)n);
    return KVC_OK;
}

/* The resolved plan under construction, and the residence of its buffers. */
typedef struct {
    struct kvc_plan_op *ops;
    size_t n, cap;
    kvc_residence_t res;
    kvc_stream_t stream;
} builder_t;

static kvc_status_t builder_init(builder_t *b, kvc_context_t *ctx, const char *op, int64_t cap, kvc_stream_t s)
{
    *b = (builder_t){ .cap = (size_t)cap, .stream = s };
    kvc_res_init(&b->res, ctx, op);
    if (cap > 0 && (uint64_t)cap > SIZE_MAX / sizeof(struct kvc_plan_op))
        return kvc_error(KVC_ERR_NO_MEMORY, "%s: %lld ops", op, (long long)cap);
    if (cap > 0 && !(b->ops = calloc((size_t)cap, sizeof(struct kvc_plan_op))))
        return kvc_error(KVC_ERR_NO_MEMORY, "%s: %lld resolved ops", op, (long long)cap);
    return KVC_OK;
}

static struct kvc_plan_op *push(builder_t *b, int kind)
{
    struct kvc_plan_op *op = &b->ops[b->n++];
    op->kind = kind;
    return op;
}

/* One staging copy; its device-side buffer (the destination of H2D, the source of D2H) joins the
 * routing, the host side never does (a copy runs between the two sides). */
static kvc_status_t add_copy(builder_t *b, void *dst, const void *src, size_t n, size_t off, int direction, size_t align)
{
    if (n == 0) return KVC_OK;
    const kvc_status_t st = kvc_copy_check(dst, src, n, off, align);
    if (st != KVC_OK) return st;
    kvc_res_add(&b->res, "staging", -1, direction == KVC_H2D ? dst : src);
    push(b, KVC_PLAN_OP_COPY)->u.copy = (struct kvc_copy_split){ .dst = dst,
                                                                 .src = src,
                                                                 .nbytes = n,
                                                                 .direction = direction,
                                                                 .host_offset = off,
                                                                 .host_alignment = align,
                                                                 .stream = b->stream };
    return KVC_OK;
}

static kvc_status_t run(builder_t *b)
{
    kvc_route_t to;
    kvc_status_t st = kvc_res_route(&b->res, &to);
    if (st == KVC_OK && b->n) {
        const struct kvc_plan_args a = { .ops = b->ops, .count = b->n, .stream = b->stream };
        st = to.ops->run_plan(to.b, &a);
    }
    return st;
}

/* ---------------------------------------------------------------- object-group transfer */

static kvc_status_t check_kernel_group(const kvc_kernel_group_t *g)
{
    kvc_status_t st = check_array("objects", g->objects, g->num_objects);
    if (st == KVC_OK) st = check_array("block_ids", g->block_ids, g->block_ids_capacity);
    return st;
}

static kvc_status_t add_launch(kvc_context_t *ctx, builder_t *b, const kvc_object_plan_t *pl, const kvc_launch_var_t *lv)
{
    if (lv->group_idx < 0 || lv->group_idx >= pl->num_groups)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "group_idx %lld outside [0, %lld)", (long long)lv->group_idx,
                         (long long)pl->num_groups);
    const kvc_kernel_group_t *g = &pl->groups[lv->group_idx];
    const int64_t max_objects = g->num_objects < 4 ? g->num_objects : 4;
    if (lv->num_objects < 1 || lv->num_objects > max_objects)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "num_objects %lld outside [1, %lld] (the group has %lld, at most 4)",
                         (long long)lv->num_objects, (long long)max_objects, (long long)g->num_objects);
    if (lv->block_ids_offset < 0 || lv->total_blocks < 0 ||
        lv->total_blocks > g->block_ids_capacity - lv->block_ids_offset)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "block ids [%lld, +%lld) outside the group's capacity %lld",
                         (long long)lv->block_ids_offset, (long long)lv->total_blocks,
                         (long long)g->block_ids_capacity);
    const kvc_block_transfer_t t = { .format = g->format,
                                     .direction = pl->direction,
                                     .shape = g->shape,
                                     .engine_ptrs = g->engine_ptrs,
                                     .num_engine_ptrs = g->num_engine_ptrs,
                                     .objects = g->objects,
                                     .num_objects = lv->num_objects,
                                     .chunk_layout = g->chunk_layout,
                                     .chunk_tokens = g->chunk_tokens,
                                     .block_ids = g->block_ids ? g->block_ids + lv->block_ids_offset : NULL,
                                     .block_id_type = KVC_INDEX_INT64,
                                     .num_block_ids = lv->total_blocks,
                                     .skip_prefix_blocks = lv->skip_prefix_blocks,
                                     .stream = pl->stream };
    struct kvc_block_plan p;
    int empty = 0;
    const kvc_status_t st = kvc_blocks_prepare(ctx, &t, &p, &empty);
    if (st != KVC_OK || empty) return st;
    for (int64_t i = 0; i < g->num_engine_ptrs; i++) kvc_res_add(&b->res, "engine_ptrs", i, g->engine_ptrs[i]);
    for (int64_t i = 0; i < lv->num_objects; i++) kvc_res_add(&b->res, "objects", i, g->objects[i]);
    if (p.index_on_device) kvc_res_add(&b->res, "block_ids", -1, p.block_ids);
    push(b, KVC_PLAN_OP_BLOCKS)->u.blocks = p;
    return KVC_OK;
}

static kvc_status_t add_staging(builder_t *b, const kvc_object_plan_t *pl, int64_t si)
{
    const kvc_batch_step_t *s = &pl->steps[si];
    for (int64_t j = 0; j < s->num_staging; j++) {
        const kvc_staging_copy_t *c = &s->staging[j];
        const kvc_status_t st =
            add_copy(b, c->dest, c->src, c->nbytes, c->host_offset, pl->direction, pl->host_buffer_alignment);
        if (st != KVC_OK) return at(st, "steps[%lld].staging[%lld]", (long long)si, (long long)j);
    }
    return KVC_OK;
}

KVC_API kvc_status_t kvc_execute_object_plan(kvc_context_t *ctx, const kvc_object_plan_t *pl)
{
    if (!ctx || !pl) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and plan must not be NULL");
    if (pl->field_mask)
        return kvc_error(KVC_ERR_INVALID_ARG, "plan->field_mask 0x%llx: no bit is defined",
                         (unsigned long long)pl->field_mask);
    if (pl->direction != KVC_H2D && pl->direction != KVC_D2H)
        return kvc_error(KVC_ERR_INVALID_ARG, "direction = %d: must be KVC_H2D (0) or KVC_D2H (1)", (int)pl->direction);
    kvc_status_t st = check_alignment(pl->host_buffer_alignment);
    if (st == KVC_OK) st = check_array("groups", pl->groups, pl->num_groups);
    if (st == KVC_OK) st = check_array("steps", pl->steps, pl->num_steps);
    if (st != KVC_OK) return st;
    for (int64_t g = 0; g < pl->num_groups; g++)
        if ((st = check_kernel_group(&pl->groups[g])) != KVC_OK) return at(st, "groups[%lld]", (long long)g);
    int64_t total = 0;
    for (int64_t i = 0; i < pl->num_steps; i++) {
        const kvc_batch_step_t *s = &pl->steps[i];
        if ((st = check_array("staging", s->staging, s->num_staging)) != KVC_OK ||
            (st = check_array("launches", s->launches, s->num_launches)) != KVC_OK)
            return at(st, "steps[%lld]", (long long)i);
        if (s->num_staging > INT64_MAX - total - s->num_launches)
            return kvc_error(KVC_ERR_NO_MEMORY, "steps: too many copies and launches");
        total += s->num_staging + s->num_launches;
    }
    builder_t b;
    if ((st = builder_init(&b, ctx, "execute_object_plan", total, pl->stream)) != KVC_OK) return st;
    const int h2d = pl->direction == KVC_H2D;
    for (int64_t i = 0; i < pl->num_steps && st == KVC_OK; i++) {
        const kvc_batch_step_t *s = &pl->steps[i];
        if (h2d) st = add_staging(&b, pl, i);
        for (int64_t j = 0; j < s->num_launches && st == KVC_OK; j++)
            if ((st = add_launch(ctx, &b, pl, &s->launches[j])) != KVC_OK)
                st = at(st, "steps[%lld].launches[%lld]", (long long)i, (long long)j);
        if (!h2d && st == KVC_OK) st = add_staging(&b, pl, i);
    }
    if (st == KVC_OK) st = run(&b);
    free(b.ops);
    return st;
}

/* ---------------------------------------------------------------- CacheBlend retrieve */

/* A group's derived geometry. */
typedef struct {
    int64_t planes, row_bytes, layer_bytes; /* one temp slot: [planes, NL, slot_tokens, row] */
    size_t es;
} cb_geom_t;

static kvc_status_t check_cb_group(const kvc_cb_group_t *g, cb_geom_t *geo)
{
    kvc_status_t st = check_array("temp_slots", g->temp_slots, g->num_temp_slots);
    if (st == KVC_OK) st = check_array("slot_mapping", g->slot_mapping, g->slot_mapping_capacity);
    if (st != KVC_OK) return st;
    if (g->num_temp_slots < 1 || g->slot_tokens < 1)
        return kvc_error(KVC_ERR_SHAPE, "num_temp_slots %lld and slot_tokens %lld must be at least 1",
                         (long long)g->num_temp_slots, (long long)g->slot_tokens);
    for (int64_t i = 0; i < g->num_temp_slots; i++)
        if (!g->temp_slots[i]) return kvc_error(KVC_ERR_INVALID_ARG, "temp_slots[%lld] is NULL", (long long)i);
    kvc_layout_t l;
    if ((st = kvc_layout_build(g->format, &g->shape, KVC_CHUNK_DEFAULT, &l)) != KVC_OK) return st;
    geo->planes = l.planes;
    geo->row_bytes = l.row_bytes;
    geo->layer_bytes = kvc_mul2(g->slot_tokens, l.row_bytes);
    if (geo->layer_bytes < 0 || kvc_mul3(l.planes, g->shape.nl, geo->layer_bytes) < 0)
        return kvc_error(KVC_ERR_SHAPE, "a temp slot of %lld tokens overflows 64-bit byte offsets",
                         (long long)g->slot_tokens);
    geo->es = (size_t)g->shape.element_size;
    if (!g->table.data) return KVC_OK;
    if (g->key_dtype != KVC_DTYPE_F16 && g->key_dtype != KVC_DTYPE_BF16 && g->key_dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_DTYPE, "key_dtype %s is not f16, bf16 or f32", kvc_dtype_name(g->key_dtype));
    if (kvc_dtype_size(g->key_dtype) != geo->es)
        return kvc_error(KVC_ERR_DTYPE, "key_dtype %s does not have the shape's %zu-byte elements",
                         kvc_dtype_name(g->key_dtype), geo->es);
    if (g->style != KVC_ROPE_NEOX && g->style != KVC_ROPE_GPTJ)
        return kvc_error(KVC_ERR_INVALID_ARG, "style %d is neither KVC_ROPE_NEOX nor KVC_ROPE_GPTJ", (int)g->style);
    const int64_t row_elems = l.row_bytes / (int64_t)geo->es;
    if (g->rope_num_heads < 1 || g->rope_head_stride < 1 || g->rope_num_heads > row_elems / g->rope_head_stride ||
        g->rope_num_heads * g->rope_head_stride != row_elems)
        return kvc_error(KVC_ERR_SHAPE, "rope_num_heads %lld x rope_head_stride %lld must be the row's %lld elements",
                         (long long)g->rope_num_heads, (long long)g->rope_head_stride, (long long)row_elems);
    if (g->rope_base_offset < 0 || g->rope_base_offset % (int64_t)geo->es ||
        g->rope_base_offset / (int64_t)geo->es >= g->rope_head_stride)
        return kvc_error(KVC_ERR_SHAPE,
                         "rope_base_offset %lld bytes: must be a multiple of %zu below the head stride (%lld elements)",
                         (long long)g->rope_base_offset, geo->es, (long long)g->rope_head_stride);
    return KVC_OK;
}

/* Re-rotation of one temp slot: one rope op per layer, over host position ramps the plan owns. */
static kvc_status_t add_rope(kvc_context_t *ctx, builder_t *b, const kvc_cb_group_t *g, const cb_geom_t *geo,
                             const int64_t *row, int64_t *pos)
{
    const int64_t slot = row[1], old_start = row[2], new_start = row[3], T = g->slot_tokens;
    if (slot < 0 || slot >= g->num_temp_slots)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "slot_idx %lld outside [0, %lld)", (long long)slot,
                         (long long)g->num_temp_slots);
    if (old_start < 0 || new_start < 0 || old_start > INT64_MAX - T || new_start > INT64_MAX - T)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "start positions %lld, %lld must be >= 0", (long long)old_start,
                         (long long)new_start);
    for (int64_t t = 0; t < T; t++) {
        pos[t] = old_start + t;
        pos[T + t] = new_start + t;
    }
    const int64_t off = g->rope_base_offset / (int64_t)geo->es;
    for (int64_t l = 0; l < g->shape.nl; l++) {
        const kvc_rope_keys_t k = { .data = (char *)g->temp_slots[slot] + l * geo->layer_bytes + g->rope_base_offset,
                                    .dtype = g->key_dtype,
                                    .num_tokens = (size_t)T,
                                    .num_heads = (size_t)g->rope_num_heads,
                                    .head_size = (size_t)(g->rope_head_stride - off),
                                    .head_stride = (size_t)g->rope_head_stride,
                                    .token_stride = (size_t)(geo->row_bytes / (int64_t)geo->es) };
        struct kvc_rope_args a = { .is_neox = g->style == KVC_ROPE_NEOX };
        int empty = 0;
        const kvc_status_t st = kvc_rope_fused_prepare(ctx, b->stream, &k, pos, pos + T, &g->table, &a, &empty);
        if (st != KVC_OK) return st;
        push(b, KVC_PLAN_OP_ROPE)->u.rope = a;
    }
    kvc_res_add(&b->res, "temp_slots", slot, g->temp_slots[slot]);
    kvc_res_add(&b->res, "table", -1, g->table.data);
    return KVC_OK;
}

static kvc_status_t add_scatter(kvc_context_t *ctx, builder_t *b, const kvc_cb_group_t *g, const int64_t *row,
                                kvc_stream_t stream)
{
    const int64_t slot = row[1], off = row[2], n = row[3];
    if (slot < 0 || slot >= g->num_temp_slots)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "slot_idx %lld outside [0, %lld)", (long long)slot,
                         (long long)g->num_temp_slots);
    if (n < 0 || n > g->slot_tokens)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "num_tokens %lld outside [0, %lld] (slot_tokens)", (long long)n,
                         (long long)g->slot_tokens);
    if (off < 0 || off > g->slot_mapping_capacity - n)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "slot mapping [%lld, +%lld) outside the group's capacity %lld",
                         (long long)off, (long long)n, (long long)g->slot_mapping_capacity);
    if (n == 0) return KVC_OK;
    const kvc_token_transfer_t t = { .format = g->format,
                                     .direction = KVC_H2D,
                                     .shape = g->shape,
                                     .engine_ptrs = g->engine_ptrs,
                                     .num_engine_ptrs = g->num_engine_ptrs,
                                     .chunk = g->temp_slots[slot],
                                     .chunk_layout = KVC_CHUNK_DEFAULT,
                                     .num_tokens = n,
                                     .slots = g->slot_mapping + off,
                                     .slot_type = KVC_INDEX_INT64,
                                     .num_slots = n,
                                     .stream = stream };
    struct kvc_token_plan p;
    int empty = 0;
    const kvc_status_t st = kvc_tokens_prepare(ctx, &t, g->slot_tokens, &p, &empty);
    if (st != KVC_OK) return st;
    for (int64_t i = 0; i < g->num_engine_ptrs; i++) kvc_res_add(&b->res, "engine_ptrs", i, g->engine_ptrs[i]);
    kvc_res_add(&b->res, "temp_slots", slot, g->temp_slots[slot]);
    if (p.index_on_device) kvc_res_add(&b->res, "slot_mapping", -1, p.slots);
    push(b, KVC_PLAN_OP_TOKENS)->u.tokens = p;
    return KVC_OK;
}

/* Rope rows of groups with a table: the ops and position entries they resolve to. */
static kvc_status_t count_ropes(const kvc_cb_plan_t *pl, int64_t *ops, int64_t *positions)
{
    *ops = *positions = 0;
    for (int64_t i = 0; i < pl->num_ropes; i++) {
        const int64_t g = pl->ropes[4 * i];
        if (g < 0 || g >= pl->num_groups || !pl->groups[g].table.data) continue;
        const kvc_cb_group_t *gr = &pl->groups[g];
        if (gr->shape.nl > INT64_MAX / 4 - *ops || gr->slot_tokens > (INT64_MAX / 8 - *positions) / 2)
            return kvc_error(KVC_ERR_NO_MEMORY, "ropes: too many rotations");
        *ops += gr->shape.nl;
        *positions += 2 * gr->slot_tokens;
    }
    return KVC_OK;
}

static kvc_status_t check_rows(const char *what, const int64_t *rows, int64_t from, int64_t to, int64_t ngroups)
{
    for (int64_t i = from; i < to; i++)
        if (rows[4 * i] < 0 || rows[4 * i] >= ngroups)
            return kvc_error(KVC_ERR_OUT_OF_RANGE, "%s[%lld]: group_idx %lld outside [0, %lld)", what, (long long)i,
                             (long long)rows[4 * i], (long long)ngroups);
    return KVC_OK;
}

static kvc_status_t cb_build(kvc_context_t *ctx, builder_t *b, const kvc_cb_plan_t *pl, const cb_geom_t *geo,
                             int64_t *pos)
{
    kvc_status_t st = KVC_OK;
    int64_t s0 = 0, r0 = 0, c0 = 0;
    for (int64_t i = 0; i < pl->num_steps; i++) {
        const int64_t *e = &pl->step_offsets[3 * i];
        if (e[0] < s0 || e[0] > pl->num_staging || e[1] < r0 || e[1] > pl->num_ropes || e[2] < c0 ||
            e[2] > pl->num_scatters)
            return kvc_error(KVC_ERR_OUT_OF_RANGE,
                             "step_offsets[%lld] = {%lld, %lld, %lld}: not monotone or past the tables' %lld, %lld, "
                             "%lld rows",
                             (long long)i, (long long)e[0], (long long)e[1], (long long)e[2],
                             (long long)pl->num_staging, (long long)pl->num_ropes, (long long)pl->num_scatters);
        for (int64_t j = s0; j < e[0]; j++) {
            const int64_t *c = &pl->staging[4 * j];
            if (c[2] < 0 || c[3] < 0)
                return kvc_error(KVC_ERR_INVALID_ARG, "staging[%lld]: nbytes %lld and host_offset %lld must be >= 0",
                                 (long long)j, (long long)c[2], (long long)c[3]);
            if ((st = add_copy(b, (void *)(uintptr_t)c[0], (const void *)(uintptr_t)c[1], (size_t)c[2], (size_t)c[3],
                               KVC_H2D, pl->host_buffer_alignment)) != KVC_OK)
                return at(st, "staging[%lld]", (long long)j);
        }
        if ((st = check_rows("ropes", pl->ropes, r0, e[1], pl->num_groups)) != KVC_OK ||
            (st = check_rows("scatters", pl->scatters, c0, e[2], pl->num_groups)) != KVC_OK)
            return st;
        /* Group by group, rotations before scatters (LMCache's native order). */
        for (int64_t g = 0; g < pl->num_groups; g++) {
            const kvc_cb_group_t *gr = &pl->groups[g];
            for (int64_t j = r0; j < e[1]; j++) {
                if (pl->ropes[4 * j] != g || !gr->table.data) continue;
                if ((st = add_rope(ctx, b, gr, &geo[g], &pl->ropes[4 * j], pos)) != KVC_OK)
                    return at(st, "ropes[%lld]", (long long)j);
                pos += 2 * gr->slot_tokens;
            }
            for (int64_t j = c0; j < e[2]; j++) {
                if (pl->scatters[4 * j] != g) continue;
                if ((st = add_scatter(ctx, b, gr, &pl->scatters[4 * j], pl->stream)) != KVC_OK)
                    return at(st, "scatters[%lld]", (long long)j);
            }
        }
        s0 = e[0];
        r0 = e[1];
        c0 = e[2];
    }
    return KVC_OK;
}

KVC_API kvc_status_t kvc_execute_cb_plan(kvc_context_t *ctx, const kvc_cb_plan_t *pl)
{
    if (!ctx || !pl) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and plan must not be NULL");
    if (pl->field_mask)
        return kvc_error(KVC_ERR_INVALID_ARG, "plan->field_mask 0x%llx: no bit is defined",
                         (unsigned long long)pl->field_mask);
    kvc_status_t st = check_alignment(pl->host_buffer_alignment);
    if (st == KVC_OK) st = check_array("groups", pl->groups, pl->num_groups);
    if (st == KVC_OK) st = check_array("staging", pl->staging, pl->num_staging);
    if (st == KVC_OK) st = check_array("ropes", pl->ropes, pl->num_ropes);
    if (st == KVC_OK) st = check_array("scatters", pl->scatters, pl->num_scatters);
    if (st == KVC_OK) st = check_array("step_offsets", pl->step_offsets, pl->num_steps);
    if (st != KVC_OK) return st;
    cb_geom_t *geo = calloc(pl->num_groups ? (size_t)pl->num_groups : 1, sizeof(*geo));
    if (!geo) return kvc_error(KVC_ERR_NO_MEMORY, "execute_cb_plan: %lld groups", (long long)pl->num_groups);
    for (int64_t g = 0; g < pl->num_groups && st == KVC_OK; g++)
        if ((st = check_cb_group(&pl->groups[g], &geo[g])) != KVC_OK) st = at(st, "groups[%lld]", (long long)g);
    int64_t rope_ops = 0, positions = 0;
    if (st == KVC_OK) st = count_ropes(pl, &rope_ops, &positions);
    int64_t *pos = NULL;
    builder_t b = { 0 };
    if (st == KVC_OK && positions && !(pos = malloc((size_t)positions * sizeof(int64_t))))
        st = kvc_error(KVC_ERR_NO_MEMORY, "execute_cb_plan: %lld positions", (long long)positions);
    if (st == KVC_OK) {
        if (pl->num_staging > INT64_MAX / 4 - rope_ops - pl->num_scatters)
            st = kvc_error(KVC_ERR_NO_MEMORY, "execute_cb_plan: too many ops");
        else
            st = builder_init(&b, ctx, "execute_cb_plan", pl->num_staging + rope_ops + pl->num_scatters, pl->stream);
    }
    if (st == KVC_OK) st = cb_build(ctx, &b, pl, geo, pos);
    if (st == KVC_OK) st = run(&b);
    free(b.ops);
    free(pos);
    free(geo);
    return st;
}
