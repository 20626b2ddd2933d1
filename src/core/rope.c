/* SPDX-License-Identifier: BSD-3-Clause */
/* RoPE public API: validate every argument once, then call the backend slot. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include <kvcore/rope.h>

#include "common/checked.h"
#include "internal.h"

/* Bytes of a key or table element: RoPE takes f32, f16 and bf16 only (0 for any other type). */
static size_t rope_elem_size(kvc_dtype_t d)
{
    return d == KVC_DTYPE_F32 || d == KVC_DTYPE_F16 || d == KVC_DTYPE_BF16 ? kvc_dtype_size(d) : 0;
}

/* The pair style the params ask for (default NEOX), checked. */
static kvc_status_t resolve_style(const kvc_rope_params_t *p, int *is_neox)
{
    const uint64_t mask = p ? p->field_mask : 0;
    if (mask & ~(uint64_t)KVC_ROPE_PARAM_STYLE)
        return kvc_error(KVC_ERR_INVALID_ARG, "params.field_mask has unknown bits 0x%llx (built against a newer kvcore?)",
                         (unsigned long long)(mask & ~(uint64_t)KVC_ROPE_PARAM_STYLE));
    const kvc_rope_style_t style = (mask & KVC_ROPE_PARAM_STYLE) ? p->style : KVC_ROPE_NEOX;
    *is_neox = style == KVC_ROPE_NEOX;
    if (style != KVC_ROPE_NEOX && style != KVC_ROPE_GPTJ)
        return kvc_error(KVC_ERR_INVALID_ARG, "style %d is neither KVC_ROPE_NEOX nor KVC_ROPE_GPTJ", (int)style);
    return KVC_OK;
}

static kvc_status_t check_base(double base)
{
    if (!isfinite(base) || base <= 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "base %g must be finite and positive", base);
    return KVC_OK;
}

static kvc_status_t check_rot_dim(size_t rot_dim, size_t head_size)
{
    if (rot_dim == 0) return kvc_error(KVC_ERR_INVALID_ARG, "rot_dim must not be 0");
    if (rot_dim % 2) return kvc_error(KVC_ERR_SHAPE, "rot_dim %zu is odd", rot_dim);
    if (head_size && rot_dim > head_size)
        return kvc_error(KVC_ERR_SHAPE, "rot_dim %zu exceeds head_size %zu", rot_dim, head_size);
    return KVC_OK;
}

/* Validates keys and returns a copy with strides resolved, and the bytes they span. */
static kvc_status_t check_keys(const kvc_rope_keys_t *k, kvc_rope_keys_t *out, size_t *span)
{
    if (!k) return kvc_error(KVC_ERR_INVALID_ARG, "keys must not be NULL");
    const size_t es = rope_elem_size(k->dtype);
    if (!es) return kvc_error(KVC_ERR_DTYPE, "keys->dtype %s is not f32, f16 or bf16", kvc_dtype_name(k->dtype));
    if (k->num_heads == 0 || k->head_size == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "keys: num_heads (%zu) and head_size (%zu) must be at least 1",
                         k->num_heads, k->head_size);
    *out = *k;
    if (!out->head_stride) out->head_stride = k->head_size;
    if (out->head_stride < k->head_size)
        return kvc_error(KVC_ERR_SHAPE, "keys: head_stride %zu is smaller than head_size %zu", out->head_stride,
                         k->head_size);
    size_t row; /* elements spanned by one token: (num_heads-1)*head_stride + head_size */
    if (!kvc_mul_ok(k->num_heads - 1, out->head_stride, &row) ||
        !kvc_add_ok(row, k->head_size, &row))
        return kvc_error(KVC_ERR_SHAPE, "keys: num_heads %zu x head_stride %zu overflows", k->num_heads,
                         out->head_stride);
    if (!out->token_stride && !kvc_mul_ok(k->num_heads, out->head_stride, &out->token_stride))
        return kvc_error(KVC_ERR_SHAPE, "keys: num_heads %zu x head_stride %zu overflows", k->num_heads,
                         out->head_stride);
    if (out->token_stride < row)
        return kvc_error(KVC_ERR_SHAPE, "keys: token_stride %zu is smaller than the %zu elements a token's heads span",
                         out->token_stride, row);
    size_t bytes = 0;
    if (k->num_tokens && (!kvc_mul_ok(k->num_tokens - 1, out->token_stride, &bytes) ||
                          !kvc_add_ok(bytes, row, &bytes) || !kvc_mul_ok(bytes, es, &bytes)))
        return kvc_error(KVC_ERR_SHAPE, "keys: %zu tokens x token_stride %zu overflows", k->num_tokens,
                         out->token_stride);
    if (k->num_tokens && !k->data) return kvc_error(KVC_ERR_INVALID_ARG, "keys->data must not be NULL");
    if ((uintptr_t)k->data % es)
        return kvc_error(KVC_ERR_ALIGNMENT, "keys->data %p is not aligned to its %zu-byte elements", k->data, es);
    *span = bytes;
    return KVC_OK;
}

/* The keys are rewritten in place: an input they overlap (table or positions) would be read after
 * being changed. Range intersection only. */
static kvc_status_t check_apart(const kvc_rope_keys_t *k, size_t span, const char *name, const void *p, size_t bytes)
{
    const uintptr_t k0 = (uintptr_t)k->data, p0 = (uintptr_t)p;
    if (span && bytes && k0 < p0 + bytes && p0 < k0 + span)
        return kvc_error(KVC_ERR_OVERLAP, "%s [%p, +%zu bytes) overlaps the keys [%p, +%zu bytes)", name, p, bytes, k->data,
                         span);
    return KVC_OK;
}

static kvc_status_t check_positions(const char *name, const int64_t *pos, size_t n, int64_t limit)
{
    if (!pos) return kvc_error(KVC_ERR_INVALID_ARG, "%s must not be NULL", name);
    if ((uintptr_t)pos % sizeof(int64_t))
        return kvc_error(KVC_ERR_ALIGNMENT, "%s %p is not aligned to 8 bytes", name, (const void *)pos);
    for (size_t i = 0; i < n; i++)
        if (pos[i] < 0 || pos[i] >= limit)
            return kvc_error(KVC_ERR_OUT_OF_RANGE, "%s[%zu] = %lld outside [0, %lld)", name, i, (long long)pos[i],
                             (long long)limit);
    return KVC_OK;
}

static kvc_status_t check_table(const kvc_rope_table_t *t, size_t head_size)
{
    if (!t) return kvc_error(KVC_ERR_INVALID_ARG, "table must not be NULL");
    const size_t es = rope_elem_size(t->dtype);
    if (!es) return kvc_error(KVC_ERR_DTYPE, "table->dtype %s is not f32, f16 or bf16", kvc_dtype_name(t->dtype));
    if (!t->data) return kvc_error(KVC_ERR_INVALID_ARG, "table->data must not be NULL");
    if (t->max_position == 0) return kvc_error(KVC_ERR_INVALID_ARG, "table->max_position must not be 0");
    if (t->max_position > (size_t)KVC_ROPE_POSITION_LIMIT)
        return kvc_error(KVC_ERR_SHAPE, "table->max_position %zu exceeds KVC_ROPE_POSITION_LIMIT", t->max_position);
    kvc_status_t st = check_rot_dim(t->rot_dim, head_size);
    if (st != KVC_OK) return st;
    size_t bytes;
    if (!kvc_mul_ok(t->max_position, t->rot_dim, &bytes) || !kvc_mul_ok(bytes, es, &bytes))
        return kvc_error(KVC_ERR_SHAPE, "table %zu x %zu overflows", t->max_position, t->rot_dim);
    if ((uintptr_t)t->data % es)
        return kvc_error(KVC_ERR_ALIGNMENT, "table->data %p is not aligned to its %zu-byte elements", t->data, es);
    return KVC_OK;
}

/* Positions: host tables the core reads and checks, or (on a GPU context) device memory the
 * module checks on the device (docs/GPU.md); both tables live on the same side. *on_device says
 * which; host tables are checked here against [0, limit). */
static kvc_status_t check_position_tables(kvc_context_t *ctx, const int64_t *old_pos, const int64_t *new_pos,
                                          size_t n, int64_t limit, int32_t *on_device)
{
    const int d_old = kvc_res_on_device(ctx, old_pos), d_new = kvc_res_on_device(ctx, new_pos);
    if (d_old != d_new)
        return kvc_error(KVC_ERR_INVALID_ARG,
                         "old_positions %p is %s memory and new_positions %p is %s memory: pass both on the device "
                         "or both on the host",
                         (const void *)old_pos, d_old ? "device" : "host", (const void *)new_pos,
                         d_new ? "device" : "host");
    *on_device = d_old;
    const size_t checked = d_old ? 0 : n; /* device tables: NULL and alignment only */
    kvc_status_t st = check_positions("old_positions", old_pos, checked, limit);
    if (st == KVC_OK) st = check_positions("new_positions", new_pos, checked, limit);
    return st;
}

/* The keys and the table decide, and device-resident positions. */
static kvc_status_t route_rope(kvc_context_t *ctx, const char *op, const void *keys, const void *table,
                               const int64_t *old_pos, const int64_t *new_pos, kvc_route_t *to)
{
    kvc_residence_t r;
    kvc_res_init(&r, ctx, op);
    kvc_res_add(&r, "keys->data", -1, keys);
    kvc_res_add(&r, "table->data", -1, table);
    kvc_res_add(&r, "old_positions", -1, old_pos);
    kvc_res_add(&r, "new_positions", -1, new_pos);
    return kvc_res_route(&r, to);
}

/* Validates a fused re-rotation and fills *a (is_neox already set); *empty when there are no tokens. */
kvc_status_t kvc_rope_fused_prepare(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_keys_t *keys,
                                    const int64_t *old_positions, const int64_t *new_positions,
                                    const kvc_rope_table_t *table, struct kvc_rope_args *a, int *empty)
{
    a->stream = stream;
    a->old_positions = old_positions;
    a->new_positions = new_positions;
    size_t span = 0;
    kvc_status_t st = check_keys(keys, &a->keys, &span);
    if (st == KVC_OK) st = check_table(table, a->keys.head_size);
    if (st == KVC_OK)
        st = check_apart(keys, span, "table->data", table->data,
                         table->max_position * table->rot_dim * rope_elem_size(table->dtype));
    if (st == KVC_OK) st = check_apart(keys, span, "old_positions", old_positions, keys->num_tokens * sizeof(int64_t));
    if (st == KVC_OK) st = check_apart(keys, span, "new_positions", new_positions, keys->num_tokens * sizeof(int64_t));
    if (st != KVC_OK) return st;
    if (table->dtype != keys->dtype && table->dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_DTYPE, "table dtype %s must be the key dtype (%s) or f32", kvc_dtype_name(table->dtype),
                         kvc_dtype_name(keys->dtype));
    *empty = a->keys.num_tokens == 0;
    if (*empty) return KVC_OK;
    a->position_limit = (int64_t)table->max_position;
    st = check_position_tables(ctx, old_positions, new_positions, a->keys.num_tokens, a->position_limit,
                               &a->positions_on_device);
    if (st != KVC_OK) return st;
    a->table = *table;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_rope_k_fused(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_keys_t *keys,
                                      const int64_t *old_positions, const int64_t *new_positions,
                                      const kvc_rope_table_t *table, const kvc_rope_params_t *params)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    struct kvc_rope_args a = { 0 };
    int empty = 0;
    kvc_status_t st = resolve_style(params, &a.is_neox);
    if (st == KVC_OK) st = kvc_rope_fused_prepare(ctx, stream, keys, old_positions, new_positions, table, &a, &empty);
    if (st != KVC_OK || empty) return st;
    kvc_route_t to;
    st = route_rope(ctx, "rope_k_fused", keys->data, table->data, a.positions_on_device ? old_positions : NULL,
                    a.positions_on_device ? new_positions : NULL, &to);
    if (st != KVC_OK) return st;
    return to.ops->rope_k_fused(to.b, &a);
}

KVC_API kvc_status_t kvc_rope_cache_build(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_table_t *table,
                                          double base)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    kvc_status_t st = check_table(table, 0);
    if (st == KVC_OK) st = check_base(base);
    if (st != KVC_OK) return st;
    const struct kvc_rope_cache_args a = { .stream = stream, .table = *table, .base = base };
    kvc_route_t to;
    if ((st = route_rope(ctx, "rope_cache_build", NULL, table->data, NULL, NULL, &to)) != KVC_OK) return st;
    return to.ops->rope_cache_build(to.b, &a);
}

KVC_API kvc_status_t kvc_rope_k_delta(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_keys_t *keys,
                                      const int64_t *old_positions, const int64_t *new_positions, size_t rot_dim,
                                      double base, const kvc_rope_params_t *params)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    struct kvc_rope_delta_args a = { .stream = stream, .old_positions = old_positions, .new_positions = new_positions,
                                     .rot_dim = rot_dim, .base = base };
    size_t span = 0;
    kvc_status_t st = resolve_style(params, &a.is_neox);
    if (st == KVC_OK) st = check_keys(keys, &a.keys, &span);
    if (st == KVC_OK) st = check_rot_dim(rot_dim, a.keys.head_size);
    if (st == KVC_OK) st = check_base(base);
    if (st == KVC_OK) st = check_apart(keys, span, "old_positions", old_positions, keys->num_tokens * sizeof(int64_t));
    if (st == KVC_OK) st = check_apart(keys, span, "new_positions", new_positions, keys->num_tokens * sizeof(int64_t));
    if (st != KVC_OK) return st;
    if (a.keys.num_tokens == 0) return KVC_OK;
    a.position_limit = KVC_ROPE_POSITION_LIMIT;
    st = check_position_tables(ctx, old_positions, new_positions, a.keys.num_tokens, a.position_limit,
                               &a.positions_on_device);
    if (st != KVC_OK) return st;
    kvc_route_t to;
    st = route_rope(ctx, "rope_k_delta", keys->data, NULL, a.positions_on_device ? old_positions : NULL,
                    a.positions_on_device ? new_positions : NULL, &to);
    if (st != KVC_OK) return st;
    return to.ops->rope_k_delta(to.b, &a);
}
