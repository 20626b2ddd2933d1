/* SPDX-License-Identifier: BSD-3-Clause */
/* Pre-built plans (LMCache's execute_object_group_transfer and execute_cb_retrieve_plan_flat):
 * many staging copies, block transfers, re-rotations and per-token scatters executed by one call,
 * in order, on one stream. docs/PLANS.md describes both plans, their tables and the deliberate
 * differences from LMCache.
 *
 * Every part of a plan is validated before its first byte moves (group and slot indices, object
 * counts, index slices against their capacities, the alignment, copy sizes, and each transfer and
 * rotation as the single calls of transfer.h and rope.h check them): a plan that fails has changed
 * nothing. The exception is an index table in device memory on a GPU context, checked on the
 * device and reported by the next kvc_stream_synchronize (docs/GPU.md), as for the single calls.
 * A plan must not write its own index tables (block ids, slot mapping): they are read once.
 * Thread safety: as transfer.h; plans whose buffers overlap race on those bytes. */
#ifndef KVCORE_PLAN_H
#define KVCORE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>
#include <kvcore/transfer.h>
#include <kvcore/rope.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One split copy (LMCache StagingCopy; kvc_memcpy_async with the plan's alignment and
 * direction): nbytes from src to dest, split at multiples of the plan's host_buffer_alignment in
 * the host buffer's offset space starting at host_offset. nbytes 0 is skipped. */
typedef struct kvc_staging_copy {
    void *dest;
    const void *src;
    size_t nbytes;
    size_t host_offset;
} kvc_staging_copy_t;

/* One block transfer (LMCache LaunchVar): kvc_transfer_blocks of group group_idx with block ids
 * group.block_ids + block_ids_offset (total_blocks of them, inside block_ids_capacity), the group's
 * first num_objects objects (1..4, and at most the group's count), and skip_prefix_blocks. */
typedef struct kvc_launch_var {
    int64_t group_idx;
    int64_t block_ids_offset;
    int64_t total_blocks;
    int64_t num_objects;
    int64_t skip_prefix_blocks;
} kvc_launch_var_t;

/* One step (LMCache BatchStep): H2D runs the staging copies, then the launches; D2H the launches,
 * then the staging copies. */
typedef struct kvc_batch_step {
    const kvc_staging_copy_t *staging;
    int64_t num_staging;
    const kvc_launch_var_t *launches;
    int64_t num_launches;
} kvc_batch_step_t;

/* A kernel group's invariants (LMCache KernelGroupSpec): the fields of kvc_block_transfer_t that
 * do not change from launch to launch. objects are the group's staging buffers, each
 * [planes, NL, chunk_tokens, row]. block_ids is int64 (host, or device memory on a GPU context). */
typedef struct kvc_kernel_group {
    kvc_format_t format;
    kvc_page_shape_t shape;
    void *const *engine_ptrs;
    int64_t num_engine_ptrs;
    void *const *objects;
    int64_t num_objects;
    kvc_chunk_layout_t chunk_layout;
    int64_t chunk_tokens;
    const int64_t *block_ids;
    int64_t block_ids_capacity; /* entries behind block_ids */
} kvc_kernel_group_t;

/* LMCache execute_object_group_transfer. No field_mask bit is defined yet: field_mask must be 0. */
typedef struct kvc_object_plan {
    uint64_t field_mask;
    kvc_direction_t direction;
    size_t host_buffer_alignment; /* a power of two > 0 */
    const kvc_kernel_group_t *groups;
    int64_t num_groups;
    const kvc_batch_step_t *steps;
    int64_t num_steps;
    kvc_stream_t stream;
} kvc_object_plan_t;

/* For each step in order: staging copies and block transfers as kvc_batch_step_t says.
 * Errors: KVC_ERR_INVALID_ARG (NULL ctx / plan / array with a nonzero count, a negative count,
 * a nonzero field_mask, a bad direction, an alignment that is not a power of two > 0, a staging
 * copy with a NULL pointer, a range that wraps or overflows, or dest and src overlapping),
 * KVC_ERR_OUT_OF_RANGE (group_idx, num_objects outside [1, min(4, group's objects)], a
 * block-id slice outside [0, block_ids_capacity), and what kvc_transfer_blocks returns for a
 * launch: block ids, skip). The launch's other errors are kvc_transfer_blocks's (KVC_ERR_FORMAT,
 * KVC_ERR_SHAPE, KVC_ERR_DTYPE, KVC_ERR_OVERLAP). KVC_ERR_NO_MEMORY: the resolved plan. The
 * message names the step and the copy or launch. */
KVC_API kvc_status_t kvc_execute_object_plan(kvc_context_t *ctx, const kvc_object_plan_t *plan);

/* A CacheBlend group (LMCache CBGroupSpec). Each temp slot holds one chunk as
 * [planes, NL, slot_tokens, row] (planes 1 for MLA and fused formats, else 2), where row is the
 * chunk row of kvc_transfer_tokens for (format, shape, KVC_CHUNK_DEFAULT). Re-rotation uses plane
 * 0 (the keys): token t of layer l is rotated as num_heads heads of head_stride elements each
 * starting rope_base_offset bytes into the row, with the table's first rot_dim elements rotated.
 * table.data NULL disables the re-rotation of the group (its rope rows are then skipped, as
 * LMCache skips them). */
typedef struct kvc_cb_group {
    kvc_format_t format;
    kvc_page_shape_t shape;
    void *const *engine_ptrs;
    int64_t num_engine_ptrs;
    void *const *temp_slots;
    int64_t num_temp_slots;
    int64_t slot_tokens;
    const int64_t *slot_mapping; /* int64, host or device memory; entries < 0 are skipped */
    int64_t slot_mapping_capacity;
    kvc_rope_table_t table;      /* cos/sin table as kvc_rope_k_fused takes it */
    kvc_dtype_t key_dtype;       /* F16, BF16 or F32; its size must be shape.element_size */
    int64_t rope_num_heads;
    int64_t rope_head_stride;    /* elements; rope_num_heads * rope_head_stride = row elements */
    int64_t rope_base_offset;    /* bytes, a multiple of the element size, < head_stride elements */
    kvc_rope_style_t style;
} kvc_cb_group_t;

/* LMCache execute_cb_retrieve_plan_flat. Tables are int64, row-major:
 *   staging [num_staging, 4]:    dest, src, nbytes, host_offset (an H2D kvc_staging_copy_t)
 *   ropes [num_ropes, 4]:        group_idx, slot_idx, old_start, new_start
 *   scatters [num_scatters, 4]:  group_idx, slot_idx, slot_mapping_offset, num_tokens
 *   step_offsets [num_steps, 3]: exclusive cumulative ends of the step's rows in staging, ropes
 *                                and scatters (non-decreasing, within the tables).
 * field_mask must be 0. */
typedef struct kvc_cb_plan {
    uint64_t field_mask;
    size_t host_buffer_alignment;
    const kvc_cb_group_t *groups;
    int64_t num_groups;
    const int64_t *staging;
    int64_t num_staging;
    const int64_t *ropes;
    int64_t num_ropes;
    const int64_t *scatters;
    int64_t num_scatters;
    const int64_t *step_offsets;
    int64_t num_steps;
    kvc_stream_t stream;
} kvc_cb_plan_t;

/* Per step: the staging copies (H2D) into the temp slots; then for each group in index order,
 * its rope rows in row order (keys of every layer of the slot moved from positions
 * old_start + t to new_start + t, t in [0, slot_tokens), as kvc_rope_k_fused) and then its
 * scatter rows (the first num_tokens rows of the slot, every plane and layer, to the engine at
 * slot_mapping[slot_mapping_offset + i], as kvc_transfer_tokens H2D).
 * Errors: as kvc_execute_object_plan for the plan, the tables and the staging copies;
 * KVC_ERR_OUT_OF_RANGE for step offsets, group_idx, slot_idx, num_tokens outside
 * [0, slot_tokens], a slot-mapping slice outside its capacity, a start position < 0 or a position
 * at or past the table's max_position, and slots as kvc_transfer_tokens; KVC_ERR_DTYPE for
 * key_dtype; KVC_ERR_SHAPE / KVC_ERR_ALIGNMENT / KVC_ERR_OVERLAP for the rotation geometry as
 * kvc_rope_k_fused, and num_temp_slots or slot_tokens < 1; the transfer's errors as
 * kvc_transfer_tokens. */
KVC_API kvc_status_t kvc_execute_cb_plan(kvc_context_t *ctx, const kvc_cb_plan_t *plan);

#ifdef __cplusplus
}
#endif
#endif
