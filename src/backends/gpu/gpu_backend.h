/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU backend internals shared by the module's files: per-context state, the staging ring for the
 * small host-side tables an op needs on the device, pointer translation, launch helpers, and the
 * op entry points the descriptor (module.cu) collects. Device code shared between files lives in
 * headers as static inline functions: no device symbol crosses a translation unit. */
#ifndef KVC_GPU_BACKEND_H
#define KVC_GPU_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hd.h"
#include "gpu_runtime.h" /* from src/backends/cuda or src/backends/hip */

/* Staging ring: page-locked host buffer + device buffer pairs. An op copies its host tables
 * (pointer tables, slots, block ids, positions) into a slot, uploads them on its stream and
 * records an event after its kernels; the slot is reused once that event has completed, so
 * calls stay asynchronous while up to KVC_GPU_STAGE_SLOTS of them are in flight. */
#define KVC_GPU_STAGE_SLOTS 8

typedef struct gpu_stage_slot {
    void *host, *dev;
    size_t cap;
    gpuEvent_t done;
    int has_event;
} gpu_stage_slot_t;

/* Deferred checks of device-resident index tables (transfer.cu, docs/GPU.md): one record per call
 * whose result the host has not seen. The check kernel flags a bad entry in the call's staging
 * slot, the copy kernel then writes nothing and stores {first bad index, its value} in the
 * record's words (page-locked, mapped); the event says when they are final. */
#define KVC_GPU_CHECKS 64

enum { GPU_CHECK_FREE, GPU_CHECK_QUEUED, GPU_CHECK_FAILED };

typedef struct gpu_check {
    int state, has_event, discard; /* discard: the call failed on the host; nothing to report */
    gpuStream_t stream;
    gpuEvent_t done;
    unsigned long long seq;
    /* the table checked: flagged index i names what[i], or what2[i - split] from split on (two
     * tables checked as one); limit_name, when set, ends the message in parentheses */
    const char *what, *what2, *limit_name;
    int64_t limit, split;
} gpu_check_t;

/* Per-context state of a GPU backend. The device context is created lazily (first op). */
struct kvc_backend_ctx {
    const kvc_backend_services_t *svc;
    int device;
    int activated;       /* gpuSetDevice done on this context's first op */
    int sm_count;        /* multiprocessors (launch sizing) */
    int pageable_access; /* the device reads pageable host memory coherently (HMM / ATS) */
    pthread_mutex_t stage_lock;
    gpu_stage_slot_t stage[KVC_GPU_STAGE_SLOTS];
    unsigned stage_next;
    /* deferred index checks, under stage_lock */
    gpu_check_t check[KVC_GPU_CHECKS];
    unsigned long long *check_words; /* 2 per record, page-locked host memory */
    unsigned long long check_seq;
};

/* The one place that maps a runtime error to a kvcore status (and logs it once, at `level`). */
kvc_status_t kvc_gpu_status(const kvc_backend_services_t *svc, gpuError_t err, const char *what, int level);

#define KVC_GPU_CALL(b, call, level) kvc_gpu_status((b)->svc, (call), #call, (level))

/* Make the context's device current (first use creates the primary context). */
kvc_status_t kvc_gpu_activate(kvc_backend_ctx_t *b);

/* A staging slot held by one op (between kvc_gpu_stage_begin and kvc_gpu_stage_end the ring's
 * lock is held: keep the span to a few runtime calls). */
typedef struct gpu_stage {
    char *host, *dev;
    gpu_stage_slot_t *slot;
} gpu_stage_t;

/* Acquire a slot of at least `bytes` (activates the device). */
kvc_status_t kvc_gpu_stage_begin(kvc_backend_ctx_t *b, size_t bytes, gpu_stage_t *s);
/* Copy host[0, bytes) to dev on the stream. */
kvc_status_t kvc_gpu_stage_upload(kvc_backend_ctx_t *b, gpu_stage_t *s, size_t bytes, gpuStream_t stream);
/* Copy dev[0, bytes) back to host and wait for the stream (synchronous ops reading results). */
kvc_status_t kvc_gpu_stage_download(kvc_backend_ctx_t *b, gpu_stage_t *s, size_t bytes, gpuStream_t stream);
/* Release the slot after the op's work was queued on the stream; returns st, or the event error. */
kvc_status_t kvc_gpu_stage_end(kvc_backend_ctx_t *b, gpu_stage_t *s, gpuStream_t stream, kvc_status_t st);

/* A check record for a call on `stream` (stage_lock held: between kvc_gpu_stage_begin and _end);
 * *report is its device-side {index, value} words for the kernel that obeys the check. */
kvc_status_t kvc_gpu_check_acquire(kvc_backend_ctx_t *b, gpuStream_t stream, const char *op, int *rec,
                                   unsigned long long **report);
/* After the call's kernels are queued (st: the call's status so far): describe the check, record
 * its event; returns st, or the event error. */
kvc_status_t kvc_gpu_check_queue(kvc_backend_ctx_t *b, int rec, gpuStream_t stream, kvc_status_t st,
                                 const gpu_check_t *what);

/* After the stream s has been synchronised: the oldest unreported bad device-resident index
 * table of a call on s, as KVC_ERR_OUT_OF_RANGE with the core's message, or KVC_OK. */
kvc_status_t kvc_gpu_check_report(kvc_backend_ctx_t *b, gpuStream_t s);
/* Wait for and free every deferred check (context teardown). */
void kvc_gpu_check_release_all(kvc_backend_ctx_t *b);

/* Address the device uses for p: p itself for device and managed memory (and for any host memory
 * when the device reads pageable memory), the mapped address for registered host memory; NULL
 * when the device cannot reach it (pageable host memory). */
void *kvc_gpu_device_ptr(kvc_backend_ctx_t *b, const void *p);

/* KVC_ERR_INVALID_ARG naming what/index when p is not device-accessible; else stores the
 * device address in *out. */
kvc_status_t kvc_gpu_require_device_ptr(kvc_backend_ctx_t *b, const void *p, const char *op, const char *what,
                                        long long index, void **out);

/* Replace args.field (a data pointer, NULL allowed) by its device address, or return the
 * pageable-memory error from the enclosing op. */
#define KVC_GPU_REACH(b, op, args, field)                                                                     \
    do {                                                                                                      \
        if ((args).field) {                                                                                   \
            void *d_ = NULL;                                                                                  \
            const kvc_status_t st_ = kvc_gpu_require_device_ptr((b), (args).field, (op), #field, -1, &d_);    \
            if (st_ != KVC_OK) return st_;                                                                    \
            memcpy((void *)&(args).field, (const void *)&d_, sizeof(d_));                                     \
        }                                                                                                     \
    } while (0)

/* Status of the last kernel launch (launch configuration errors). */
kvc_status_t kvc_gpu_launch_status(kvc_backend_ctx_t *b, const char *kernel);

/* Blocks for a grid-stride launch over n work items of `per_block` items each: enough to fill the
 * device a few times over, never more than the work needs. */
static inline unsigned kvc_gpu_grid(const kvc_backend_ctx_t *b, uint64_t n, unsigned per_block)
{
    const uint64_t need = (n + per_block - 1) / per_block;
    const uint64_t cap = (uint64_t)(b->sm_count > 0 ? b->sm_count : 16) * 32;
    const uint64_t g = need < cap ? need : cap;
    return g ? (unsigned)g : 1u;
}

/* ---------------------------------------------------------------- ops (one file per topic) */

/* transfer.cu */
kvc_status_t kvc_gpu_transfer_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p);
kvc_status_t kvc_gpu_transfer_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p);
/* cachegen.cu */
kvc_status_t kvc_gpu_cg_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a);
kvc_status_t kvc_gpu_cg_encode(kvc_backend_ctx_t *b, const struct kvc_encode_args *a);
kvc_status_t kvc_gpu_cg_decode(kvc_backend_ctx_t *b, const struct kvc_decode_args *a);
kvc_status_t kvc_gpu_cg_decode_packed(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a);
/* rans.cu */
kvc_status_t kvc_gpu_rans_tables(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a);
kvc_status_t kvc_gpu_rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a);
kvc_status_t kvc_gpu_rans_decode(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a);
/* quant.cu */
kvc_status_t kvc_gpu_quantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);
kvc_status_t kvc_gpu_dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);

/* copy.cu (memory.h) */
kvc_status_t kvc_gpu_memcpy_split(kvc_backend_ctx_t *b, const struct kvc_copy_split *a);
kvc_status_t kvc_gpu_batched_memcpy(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a);
/* rope.cu (rope.h) */
kvc_status_t kvc_gpu_rope_k_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a);
kvc_status_t kvc_gpu_rope_cache_build(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a);
kvc_status_t kvc_gpu_rope_k_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a);

/* plan.cu (plan.h) */
kvc_status_t kvc_gpu_run_plan(kvc_backend_ctx_t *b, const struct kvc_plan_args *a);

/* module.cu: the descriptor the vendor entry (src/backends/<vendor>/entry.cu) hands out. */
const kvc_backend_t *kvc_gpu_descriptor(void);

#endif
