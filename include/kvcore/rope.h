/* SPDX-License-Identifier: BSD-3-Clause */
/* RoPE for stored keys (docs/ROPE.md): move rotary-encoded keys from their stored positions to new
 * positions in place (CacheBlend re-RoPE), build the cos/sin table, or rotate by the position delta
 * without a table. Keys are rotated in fp32 for every key dtype, with one rounding at the end; see
 * docs/ROPE.md for the accuracy of each variant.
 * Thread safety: any number of threads may call these on one context at once (context.h); keys
 * and tables written by one call must not be used by a concurrent call. */
#ifndef KVCORE_ROPE_H
#define KVCORE_ROPE_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the rot_dim rotated elements of a head form pairs (x, y). */
typedef enum kvc_rope_style {
    KVC_ROPE_NEOX = 0, /* x = k[i], y = k[i + rot_dim/2] (rotate_half; vLLM is_neox=True) */
    KVC_ROPE_GPTJ = 1, /* x = k[2i], y = k[2i+1] (adjacent pairs; llama2.c, GPT-J) */
} kvc_rope_style_t;

/* Bits of kvc_rope_params_t.field_mask: a field is read only when its bit is set, so the struct
 * can grow (scaled RoPE variants, partial-rotary offsets) without breaking callers built against
 * older headers. Bits this header does not define are rejected (KVC_ERR_INVALID_ARG). */
enum {
    KVC_ROPE_PARAM_STYLE = 1u << 0, /* style; default KVC_ROPE_NEOX */
};

/* Options of kvc_rope_k_fused and kvc_rope_k_delta; NULL means all defaults. */
typedef struct kvc_rope_params {
    uint64_t field_mask;
    kvc_rope_style_t style;
} kvc_rope_params_t;

/* Positions must lie in [0, KVC_ROPE_POSITION_LIMIT) (and below a table's max_position). */
#define KVC_ROPE_POSITION_LIMIT ((int64_t)1 << 31)

/* Keys [num_tokens, num_heads, head_size], rotated in place. Only the first rot_dim elements of
 * each head are touched. Strides count elements, not bytes. */
typedef struct kvc_rope_keys {
    void *data;             /* first element of token 0, head 0; aligned to the element size */
    kvc_dtype_t dtype;
    size_t num_tokens;      /* N; 0 is a no-op (positions may then be NULL) */
    size_t num_heads;       /* NKV, at least 1 */
    size_t head_size;       /* HS, at least 1 */
    size_t head_stride;     /* elements from head h to head h+1; 0 means head_size. 2*HS for fused K/V rows */
    size_t token_stride;    /* elements from token t to t+1; 0 means num_heads*head_stride */
} kvc_rope_keys_t;

/* A cos/sin table [max_position, rot_dim] in vLLM's layout: row p is
 * [cos(p*theta_0) .. cos(p*theta_{rot_dim/2-1}), sin(p*theta_0) .. sin(p*theta_{rot_dim/2-1})]
 * with theta_i = base^(-2i/rot_dim). Rows are contiguous (row stride rot_dim). */
typedef struct kvc_rope_table {
    void *data;             /* read by kvc_rope_k_fused, written by kvc_rope_cache_build */
    kvc_dtype_t dtype;
    size_t max_position;    /* rows */
    size_t rot_dim;         /* columns: even, at least 2 */
} kvc_rope_table_t;

/* Undo the rotation at old_positions[t] and apply it at new_positions[t], for every token t, in
 * one pass: per token and pair, the two table rows are combined in double into one rotation,
 * normalised to unit length, rounded to fp32 and applied once to every head. Each table row is thus
 * taken as the rotation by its angle: the rows' norm error does not scale the keys, and old == new
 * gives the keys back bit-identical. (For a table that is not a rotation, the result is the
 * textbook two steps, docs/ROPE.md, divided by the norms of the two rows.) rot_dim is
 * table->rot_dim and must be even and <= head_size. The table dtype must equal the key dtype or be
 * KVC_DTYPE_F32. Keys, positions and table must not overlap (KVC_ERR_OVERLAP, by range intersection).
 * Errors: KVC_ERR_INVALID_ARG (NULL pointer, zero count, bad style, unknown params bits), KVC_ERR_DTYPE (unknown dtype,
 * table dtype neither the key dtype nor fp32), KVC_ERR_SHAPE (rot_dim odd or > head_size, strides
 * that make heads or tokens overlap, sizes overflowing size_t), KVC_ERR_ALIGNMENT (pointer not
 * aligned to its element), KVC_ERR_OUT_OF_RANGE (a position outside [0, max_position); the message
 * names the array and index). Nothing is written on error. CPU backend: synchronous. GPU
 * contexts: positions may both be device memory; a bad one is then reported by the next
 * kvc_stream_synchronize on the stream, not by this call (docs/GPU.md). */
KVC_API kvc_status_t kvc_rope_k_fused(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_keys_t *keys,
                                      const int64_t *old_positions, const int64_t *new_positions,
                                      const kvc_rope_table_t *table, const kvc_rope_params_t *params);

/* Fill table (all max_position rows) with cos/sin for base (finite, > 0). CPU backend: cos/sin of
 * p*theta_i in double (SLEEF's double sincos at anchor rows, angle sums in between), rounded once
 * to fp32: within half an fp32 ulp (and a hair) of cos/sin of the double angle (docs/ROPE.md). GPU
 * contexts: fp32 sincosf of the angle reduced in double, within a few ulp of the CPU's table.
 * max_position must be in [1, KVC_ROPE_POSITION_LIMIT]. Errors as above, plus KVC_ERR_INVALID_ARG
 * for a bad base. */
KVC_API kvc_status_t kvc_rope_cache_build(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_table_t *table,
                                          double base);

/* Table-free variant: rotate each token by the angle (new - old)*theta_i computed on the fly (same
 * angle scheme as kvc_rope_cache_build), i.e. a single rotation instead of two through rounded table
 * entries. Positions must lie in [0, KVC_ROPE_POSITION_LIMIT). Errors as kvc_rope_k_fused, with
 * KVC_ERR_SHAPE / KVC_ERR_INVALID_ARG for rot_dim and KVC_ERR_INVALID_ARG for a bad base; positions
 * overlapping the keys are KVC_ERR_OVERLAP. */
KVC_API kvc_status_t kvc_rope_k_delta(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_keys_t *keys,
                                      const int64_t *old_positions, const int64_t *new_positions, size_t rot_dim,
                                      double base, const kvc_rope_params_t *params);


#ifdef __cplusplus
}
#endif
#endif
