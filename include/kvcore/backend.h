/* SPDX-License-Identifier: BSD-3-Clause */
/* Backend ABI: what a backend (the built-in CPU backend, or a dlopen'ed GPU module) provides.
 *
 * A module exports exactly one symbol, kvc_backend_entry, returning a pointer to a const
 * kvc_backend_t. The core checks abi_version before touching anything else. Every op receives
 * arguments the core has already validated (shapes, ranges, sizes): backends only do the work, so
 * every device returns the same errors for the same bad call.
 *
 * The ABI is what a backend computes for the public ops: every field here is one some public call
 * fills, and a GPU module implements each slot. (What the codec asks only of the built-in CPU
 * backend is a private interface inside libkvcore, src/backends/simd/cpu_codec.h.)
 *
 * ABI rules: KVC_BACKEND_ABI_VERSION changes, once per release at most, when a slot changes its
 * meaning or signature, or a struct here changes its layout (a field added, removed, reordered or
 * retyped). Appending a slot to the end of kvc_backend_ops_t does not change it: struct_size tells
 * the core how many slots a module has, and slots a module lacks (or leaves NULL) are resolved to
 * a stub returning KVC_ERR_UNSUPPORTED, so the core never calls through NULL. The core refuses a
 * module of another number (KVC_ERR_ABI). The number is independent of the library's libtool
 * version; NEWS says when it changed.
 *
 * Thread safety: the core calls the ops of one kvc_backend_ctx_t from any number of threads at
 * once (the public headers promise that, context.h); a backend guards whatever state it shares
 * between calls (the GPU backend's staging ring has a lock). probe and init may run concurrently
 * for different contexts; fini never overlaps another call on its context. */
#ifndef KVCORE_BACKEND_H
#define KVCORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>
#include <kvcore/memory.h>
#include <kvcore/transfer.h>
#include <kvcore/cachegen.h>
#include <kvcore/rope.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_BACKEND_ABI_VERSION 6u

/* Priorities (higher wins among usable backends): GPU backends above the CPU fallback. */
#define KVC_BACKEND_PRIORITY_CUDA 50
#define KVC_BACKEND_PRIORITY_HIP 40
#define KVC_BACKEND_PRIORITY_CPU 10

/* Name of the single symbol a module exports. */
#define KVC_BACKEND_ENTRY_SYMBOL "kvc_backend_entry"

typedef struct kvc_backend_ctx kvc_backend_ctx_t; /* a backend's own per-context state */

/* CPU SIMD tiers (kvc_backend_services_t.cpu_isa): detected once per context (CPUID + XCR0),
 * capped by KVCORE_ISA; docs/ARCHITECTURE.md explains how a backend dispatches on it. */
typedef enum kvc_isa {
    KVC_ISA_SCALAR = 0,
    KVC_ISA_NEON = 1,   /* aarch64 */
    KVC_ISA_AVX2 = 2,   /* AVX2 + FMA + F16C, OS saves YMM */
    KVC_ISA_AVX512 = 3, /* AVX-512 F/BW/DQ/VL/CD, OS saves ZMM and opmask */
} kvc_isa_t;

/* ---------------------------------------------------------------- copies (memory.h) */

/* memcpy_split op: arguments validated by the core. */
struct kvc_copy_split {
    void *dst;
    const void *src;
    size_t nbytes;
    kvc_direction_t direction;
    size_t host_offset;    /* host_buffer_offset */
    size_t host_alignment; /* a power of two > 0 */
    kvc_stream_t stream;
};

/* Length of the piece starting at byte `off` (< nbytes) of a split copy (docs/MEMORY.md):
 * it ends at the next multiple of host_alignment in host offset space, or at nbytes. */
static inline size_t kvc_copy_split_piece(const struct kvc_copy_split *a, size_t off)
{
    const size_t pos = a->host_offset + off;
    const size_t region_end = (pos & ~(a->host_alignment - 1)) + a->host_alignment;
    const size_t end = a->host_offset + a->nbytes;
    return (end < region_end ? end : region_end) - pos;
}

/* batched_memcpy op: arguments validated by the core (no NULL with a nonzero size, no cross-entry
 * overlap); entries of size 0 must be skipped. */
struct kvc_batched_copy {
    void *const *dsts;
    const void *const *srcs;
    const size_t *sizes;
    size_t count;
    size_t total_bytes; /* sum of sizes */
    kvc_stream_t stream;
};

/* ---------------------------------------------------------------- KV transfers (transfer.h) */

/* Every transfer call (transfer.h) becomes one of two plans, built and validated by the core. A
 * plan holds only pointers and int64 byte counts, so a GPU module can pass it to a kernel as is.
 * (The pointer tables are the caller's; a GPU backend reads them where the caller put them.) */

/* Engine side. Address of head h of token o in block b of layer l, plane p:
 *   ptrs[l*ptr_layer_step + p*ptr_plane_step] + l*layer_offset + p*plane_offset
 *     + b*block_stride + o*token_stride + h*head_stride */
typedef struct kvc_engine_map {
    void *const *ptrs;
    int64_t ptr_layer_step, ptr_plane_step;
    int64_t layer_offset, plane_offset;
    int64_t block_stride, token_stride, head_stride; /* bytes */
    int64_t block_size;                              /* tokens per block (slot -> block, offset) */
} kvc_engine_map_t;

/* Chunk side: base + p*plane_stride + l*layer_stride + t*token_stride + h*head_stride (bytes). */
typedef struct kvc_chunk_map {
    int64_t plane_stride, layer_stride, token_stride, head_stride;
} kvc_chunk_map_t;

/* How one unit (a token, or a whole block) splits into contiguous runs present on both sides, the
 * longest the geometry allows (a head, a token row, or a whole block):
 *   for i < outer_count, j < inner_count: copy run_bytes between
 *     engine + i*outer_engine + j*inner_engine and chunk + i*outer_chunk + j*inner_chunk. */
typedef struct kvc_run_shape {
    int64_t run_bytes;
    int64_t outer_count, outer_engine, outer_chunk;
    int64_t inner_count, inner_engine, inner_chunk;
} kvc_run_shape_t;

struct kvc_token_plan {
    int32_t direction; /* kvc_direction_t */
    int64_t num_layers, num_planes;
    kvc_engine_map_t engine;
    void *chunk;
    kvc_chunk_map_t chunk_map;
    const int64_t *slots;          /* slots[t] < 0: skip; all others are in range */
    int64_t first_token, end_token; /* tokens [first_token, end_token) */
    kvc_run_shape_t runs;          /* runs of one token */
    int64_t bytes;                 /* upper bound of bytes moved (work sizing) */
    kvc_stream_t stream;
    /* Nonzero: slots is device memory (pointer_kind said so), which the core did not read; the
     * backend checks slots[first_token, end_token) against [0, index_limit) (negative: skip) on the
     * device before any write; a bad entry writes nothing, and the next stream_synchronize of the
     * stream fails as the core would ("slots[i] = v outside [0, L) (nb*bs slots)",
     * KVC_ERR_OUT_OF_RANGE; docs/GPU.md). Only modules with a pointer_kind slot ever see it set. */
    int32_t index_on_device;
    int64_t index_limit;
};

struct kvc_block_plan {
    int32_t direction;
    int64_t num_layers, num_planes;
    kvc_engine_map_t engine;
    void *const *objects;
    int64_t blocks_per_object;
    kvc_chunk_map_t chunk_map;
    const int64_t *block_ids;       /* all ids in [first_block, end_block) are in range */
    int64_t first_block, end_block; /* flat block indices f; object f / bpo, row (f % bpo)*bs */
    kvc_run_shape_t runs;           /* runs of one block (bs tokens) */
    int64_t bytes;
    kvc_stream_t stream;
    /* As in kvc_token_plan, for block_ids[first_block, end_block) in [0, index_limit) (no skips;
     * "block_ids[i] = v outside [0, L) (nb blocks)"). */
    int32_t index_on_device;
    int64_t index_limit;
};

/* Rows made of parts stored apart in the engine (formats 14 and 17: values and scale, or the
 * planes of a tuple). The transfer_*_parts slots take the plan of the whole row with this list:
 * every token's parts lie back to back in its chunk row (part k at chunk_offset, `bytes` long),
 * and part k of that token sits at its own engine map (engine.ptrs its own table; the same
 * block_size for all). In that plan `engine` is part 0's map and `runs` is unused; num_planes is
 * 1. A backend without these slots gets one transfer_tokens / transfer_blocks call per part. */
#define KVC_ROW_MAX_PARTS 4
struct kvc_row_part {
    kvc_engine_map_t engine;
    int64_t chunk_offset, bytes;
};

struct kvc_row_parts {
    int64_t count; /* 2..KVC_ROW_MAX_PARTS */
    struct kvc_row_part part[KVC_ROW_MAX_PARTS];
};

/* ---------------------------------------------------------------- CacheGen (cachegen.h) */

/* Arguments of the cg_* and quantise slots: the fields of the public parameter structs
 * (cachegen.h, which documents them) without the field mask, filled by the core. The core checks
 * pointers, counts and size
 * overflow; checks that need to read the data (symbol ranges, CDF monotonicity, lengths and
 * prefix sums) are the backend's, because the data may live in device memory. A backend runs
 * all of them before writing any output and reports failures through svc->set_error with the
 * statuses listed above. Pointers are in the backend's memory (host memory on the CPU backend),
 * except kvc_quant_args.bins and kvc_encode_args.needed, which are always host memory. */

struct kvc_cdf_args {
    const uint8_t *symbols; /* [layers, tokens, channels], each < num_bins */
    uint16_t *cdf;          /* out: [layers, channels, num_bins + 1] */
    size_t layers, tokens, channels;
    unsigned num_bins;
};

struct kvc_encode_args {
    const uint16_t *cdf;     /* [layers, channels, num_bins + 1] */
    const uint8_t *symbols;  /* [layers, tokens, channels], each < num_bins (checked before encoding) */
    uint8_t *streams;        /* out: [layers, channels, capacity] */
    int32_t *lengths;        /* out: [layers, channels] */
    size_t layers, tokens, channels;
    size_t capacity;         /* bytes per stream, at most INT32_MAX */
    unsigned num_bins;
    size_t *needed;          /* optional out (host): the longest stream's length, set on OK and NO_SPACE */
};

struct kvc_decode_args {
    const uint16_t *cdf;     /* [layers, channels, num_bins + 1]; cdf[0..num_bins-1] strictly increasing */
    const uint8_t *streams;  /* [layers, channels, capacity] */
    const int32_t *lengths;  /* [layers, channels], each in [0, capacity] */
    uint8_t *symbols;        /* out: [layers, tokens, channels] */
    size_t layers, tokens, channels;
    size_t capacity;
    unsigned num_bins;
};

struct kvc_decode_packed_args {
    const uint16_t *cdf;     /* [layers, channels, num_bins + 1] */
    const uint8_t *bytes;    /* [nbytes]; may be NULL when nbytes is 0 */
    size_t nbytes;
    const int64_t *prefsum;  /* [layers, channels]: non-decreasing, each in [0, nbytes] */
    uint8_t *symbols;        /* out: [layers, tokens, channels] */
    size_t layers, tokens, channels;
    unsigned num_bins;
};

struct kvc_quant_args {
    kvc_dtype_t dtype;
    void *values;           /* [layers, tokens, channels] of dtype: read by quantise, written by dequantise */
    uint8_t *symbols;       /* [layers, tokens, channels]: written by quantise, read by dequantise */
    float *scales;          /* [layers, tokens]: written by quantise, read by dequantise */
    const uint32_t *bins;   /* [layers] (host memory), each in [4, 64] */
    size_t layers, tokens, channels;
};

/* Arguments of the rans_tables / rans_encode / rans_decode slots: the public calls of cachegen.h
 * (kvc_rans_*) on [layers, tokens, channels] tensors of interleaved rANS streams (docs/FORMAT.md
 * "rANS streams"). A stream codes 32 channels, 4 groups of 8: stream k
 * is (layer k / Q, channels [32 (k mod Q), +32)), Q = ceil(channels / 32), with 8 states, state i
 * coding channel 8g + i of each group g of the stream; cum holds each channel's frequency table
 * ([layers, channels, num_bins + 1], kvc_rans_cum_from_counts). The core validates shapes and
 * sizes and routes a call by where its pointers live; the checks that read the data are the
 * slots': a symbol >= num_bins (tables) or without frequency (encode) KVC_ERR_OUT_OF_RANGE, a
 * table that is not one (cum[0] = 0, non-decreasing, cum[num_bins] = 4096) KVC_ERR_INVALID_ARG to
 * the encoder and KVC_ERR_CORRUPT to the decoder, bad end offsets and damaged streams
 * KVC_ERR_CORRUPT. */
struct kvc_rans_tables_args {
    const uint8_t *symbols; /* [layers, tokens, channels], each < num_bins */
    uint16_t *cum;          /* out: [layers, channels, num_bins + 1] */
    size_t layers, tokens, channels; /* tokens >= 1 */
    unsigned num_bins;
};

struct kvc_rans_encode_args {
    const uint8_t *symbols; /* [layers, tokens, channels], each < num_bins */
    const uint16_t *cum;
    uint8_t *streams;       /* out: stream k at streams + k * capacity */
    int32_t *lengths;       /* out: [layers * Q] */
    size_t layers, tokens, channels;
    size_t capacity;        /* >= kvc_rans_encode_bound(tokens) */
    unsigned num_bins;
};

struct kvc_rans_decode_args {
    const uint8_t *bytes;   /* the streams, back to back */
    const int64_t *ends;    /* [layers * Q]: end offset of each stream in bytes (non-decreasing, <= nbytes) */
    const uint16_t *cum;
    uint8_t *symbols;       /* out: [layers, tokens, channels] */
    size_t layers, tokens, channels;
    unsigned num_bins;
    size_t nbytes;          /* bytes given */
};

/* ---------------------------------------------------------------- RoPE (rope.h) */

/* Arguments of the rope_* slots, filled by the core after validation:
 * strides are resolved (never 0), host positions are in range, sizes do not overflow, num_tokens > 0. */
struct kvc_rope_args {
    kvc_stream_t stream;
    kvc_rope_keys_t keys;
    const int64_t *old_positions;
    const int64_t *new_positions;
    kvc_rope_table_t table; /* rot_dim = table.rot_dim */
    int is_neox;
    /* Nonzero: both position tables are device memory the core did not read; the backend checks
     * old_positions[0, n) then new_positions[0, n) against [0, position_limit) on the device
     * before any write, with the deferred reporting of kvc_token_plan.index_on_device
     * ("old_positions[i] = v outside [0, L)"). Only modules with a pointer_kind slot see it set. */
    int32_t positions_on_device;
    int64_t position_limit;
};

struct kvc_rope_cache_args {
    kvc_stream_t stream;
    kvc_rope_table_t table;
    double base;
};

struct kvc_rope_delta_args {
    kvc_stream_t stream;
    kvc_rope_keys_t keys;
    const int64_t *old_positions;
    const int64_t *new_positions;
    size_t rot_dim;
    double base;
    int is_neox;
    int32_t positions_on_device; /* as in kvc_rope_args */
    int64_t position_limit;
};

/* ---------------------------------------------------------------- plans (plan.h) */

/* A plan (kvc_execute_object_plan, kvc_execute_cb_plan) reaches a backend as one ordered list of
 * the ops above, each validated and resolved by the core exactly as the single calls are. The
 * backend runs them in list order on the plan's stream: later ops read what earlier ones wrote
 * (staging buffers are reused from step to step), so the order is load-bearing. */
enum kvc_plan_op_kind {
    KVC_PLAN_OP_COPY = 1,   /* u.copy: memcpy_split */
    KVC_PLAN_OP_BLOCKS = 2, /* u.blocks: transfer_blocks */
    KVC_PLAN_OP_TOKENS = 3, /* u.tokens: transfer_tokens */
    KVC_PLAN_OP_ROPE = 4,   /* u.rope: rope_k_fused */
};

struct kvc_plan_op {
    int32_t kind; /* enum kvc_plan_op_kind */
    union {
        struct kvc_copy_split copy;
        struct kvc_block_plan blocks;
        struct kvc_token_plan tokens;
        struct kvc_rope_args rope;
    } u;
};

struct kvc_plan_args {
    const struct kvc_plan_op *ops;
    size_t count;
    kvc_stream_t stream; /* every op's own stream field holds the same stream */
};

/* ---------------------------------------------------------------- the backend */

typedef void (*kvc_host_fn_t)(void *arg);

/* Where a pointer lives, as a GPU runtime's pointer attributes say (pointer_kind slot). The core
 * routes each codec / coder / quantiser / RoPE / transfer call by it (docs/ARCHITECTURE.md,
 * "Dispatch by residence"). */
typedef enum kvc_residence_kind {
    KVC_RES_PAGEABLE = 0,   /* host memory the runtime does not know (malloc, stack, mmap) */
    KVC_RES_REGISTERED = 1, /* page-locked / registered host memory: the device reaches it too */
    KVC_RES_DEVICE = 2,     /* device memory: the host cannot dereference it */
    KVC_RES_MANAGED = 3,    /* managed memory, or pageable memory on a device with coherent access (HMM/ATS) */
} kvc_residence_kind_t;

/* Services the core offers to modules (so modules log and report errors the same way). */
typedef struct kvc_backend_services {
    uint32_t abi_version;
    /* level: 1 error, 2 warn, 3 info, 4 debug, 5 trace. Cheap when the level is off. */
    int (*log_enabled)(int level);
    void (*log)(int level, const char *backend, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    /* Record the detailed message behind a status (see kvc_last_error); returns status. */
    kvc_status_t (*set_error)(kvc_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;
    int num_threads; /* CPU threads the context may use */
    int cpu_isa;     /* CPU SIMD tier chosen for the context (kvc_isa_t) */
    /* CPU transfers moving more bytes write with streaming stores (kvc_context_stream_min_bytes:
     * KVCORE_STREAM_MIN_BYTES, else derived from the last-level cache by the core). */
    int64_t stream_min_bytes;
} kvc_backend_services_t;

typedef struct kvc_backend_ops {
    /* --- host memory: page-lock / unlock a host range for DMA (CPU: mlock) --- */
    kvc_status_t (*host_register)(kvc_backend_ctx_t *b, void *ptr, size_t len);
    kvc_status_t (*host_unregister)(kvc_backend_ctx_t *b, void *ptr, size_t len);
    /* --- device memory (GPU backends; the CPU backend uses host memory) --- */
    kvc_status_t (*device_alloc)(kvc_backend_ctx_t *b, size_t len, void **out);
    kvc_status_t (*device_free)(kvc_backend_ctx_t *b, void *ptr);
    kvc_status_t (*memcpy_sync)(kvc_backend_ctx_t *b, void *dst, const void *src, size_t len);
    /* --- copies --- */
    kvc_status_t (*memcpy_split)(kvc_backend_ctx_t *b, const struct kvc_copy_split *a);
    kvc_status_t (*batched_memcpy)(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a);
    kvc_status_t (*stream_synchronize)(kvc_backend_ctx_t *b, kvc_stream_t stream);
    /* --- topology: "DDDD:BB:DD.F" of a device ordinal --- */
    kvc_status_t (*pci_bus_id)(kvc_backend_ctx_t *b, int device, char *buf, size_t len);
    /* --- KV transfers --- */
    kvc_status_t (*transfer_tokens)(kvc_backend_ctx_t *b, const struct kvc_token_plan *p);
    kvc_status_t (*transfer_blocks)(kvc_backend_ctx_t *b, const struct kvc_block_plan *p);
    /* --- CacheGen --- */
    kvc_status_t (*cg_cdf)(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a);
    kvc_status_t (*cg_encode)(kvc_backend_ctx_t *b, const struct kvc_encode_args *a);
    kvc_status_t (*cg_decode)(kvc_backend_ctx_t *b, const struct kvc_decode_args *a);
    kvc_status_t (*cg_decode_packed)(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a);
    kvc_status_t (*quantise)(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);
    kvc_status_t (*dequantise)(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);
    /* --- RoPE --- */
    kvc_status_t (*rope_k_fused)(kvc_backend_ctx_t *b, const struct kvc_rope_args *a);
    kvc_status_t (*rope_cache_build)(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a);
    kvc_status_t (*rope_k_delta)(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a);
    /* --- recorders: run fn(arg) on the host once prior work on the stream is done --- */
    kvc_status_t (*launch_host_callback)(kvc_backend_ctx_t *b, kvc_stream_t s, kvc_host_fn_t fn, void *arg);
    /* --- residence: *kind = the kvc_residence_kind_t of ptr. A module without this slot gets every call
     * (its old behaviour); the CPU backend does not need it (all its memory is host memory). --- */
    kvc_status_t (*pointer_kind)(kvc_backend_ctx_t *b, const void *ptr, int *kind);
    /* --- plans (plan.h): run a->ops in order on one stream; stop at the first failing op --- */
    kvc_status_t (*run_plan)(kvc_backend_ctx_t *b, const struct kvc_plan_args *a);
    /* --- host memory: register a mapping of a device's I/O memory (kvc_mem_map_file: a PCIe BAR's
     * sysfs resource file) so that kernels can reach it (CUDA/HIP: Mapped | IoMemory; the CPU
     * backend locks it like any range). A module without this slot cannot take such mappings. --- */
    kvc_status_t (*host_register_io)(kvc_backend_ctx_t *b, void *ptr, size_t len);
    /* --- multi-part rows (kvc_row_parts): one call moves every part of each token --- */
    kvc_status_t (*transfer_tokens_parts)(kvc_backend_ctx_t *b, const struct kvc_token_plan *p,
                                          const struct kvc_row_parts *parts);
    kvc_status_t (*transfer_blocks_parts)(kvc_backend_ctx_t *b, const struct kvc_block_plan *p,
                                          const struct kvc_row_parts *parts);
    /* --- interleaved rANS (cachegen.h kvc_rans_*; the codec's coder=rans windows) --- */
    kvc_status_t (*rans_encode)(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a);
    kvc_status_t (*rans_decode)(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a);
    kvc_status_t (*rans_tables)(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a);
} kvc_backend_ops_t;

typedef struct kvc_backend {
    uint32_t abi_version;   /* KVC_BACKEND_ABI_VERSION the backend was built for; checked first */
    uint32_t struct_size;   /* sizeof(kvc_backend_t) the backend was built with */
    const char *name;       /* "cpu", "cuda", "hip" */
    int priority;           /* KVC_BACKEND_PRIORITY_* */
    /* Count devices without creating a GPU context. "No device" is *ndevices = 0 and KVC_OK;
     * why (if non-NULL) receives a one-line explanation. */
    kvc_status_t (*probe)(const kvc_backend_services_t *svc, int *ndevices, char *why, size_t whylen);
    /* Per-context state; GPU backends create their device context lazily on first use. */
    kvc_status_t (*init)(const kvc_backend_services_t *svc, int device, kvc_backend_ctx_t **out);
    void (*fini)(kvc_backend_ctx_t *b);
    kvc_backend_ops_t ops;
} kvc_backend_t;

typedef const kvc_backend_t *(*kvc_backend_entry_fn)(void);

/* run_plan for a backend whose single-op slots do the work: each op through its slot of ops, in
 * order (the CPU backend, the GPU modules and the emulation module share it). */
static inline kvc_status_t kvc_plan_run_ops(kvc_backend_ctx_t *b, const kvc_backend_ops_t *ops,
                                            const struct kvc_plan_args *a)
{
    kvc_status_t st = KVC_OK;
    for (size_t i = 0; i < a->count && st == KVC_OK; i++) {
        const struct kvc_plan_op *op = &a->ops[i];
        switch (op->kind) {
        case KVC_PLAN_OP_COPY: st = ops->memcpy_split(b, &op->u.copy); break;
        case KVC_PLAN_OP_BLOCKS: st = ops->transfer_blocks(b, &op->u.blocks); break;
        case KVC_PLAN_OP_TOKENS: st = ops->transfer_tokens(b, &op->u.tokens); break;
        default: st = ops->rope_k_fused(b, &op->u.rope); break; /* KVC_PLAN_OP_ROPE */
        }
    }
    return st;
}

#ifdef __cplusplus
}
#endif
#endif
