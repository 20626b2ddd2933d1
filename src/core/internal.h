/* SPDX-License-Identifier: BSD-3-Clause */
/* Core-private definitions shared by the files in src/core. */
#ifndef KVC_CORE_INTERNAL_H
#define KVC_CORE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <hwloc.h>

#include <kvcore/backend.h>
#include <kvcore/topology.h>

#include "isa.h"
#include "log.h"

#define KVC_MAX_BACKENDS 3
#define KVC_MAX_GPUS 64

typedef struct kvc_recorder kvc_recorder_t; /* recorder.c */

typedef struct kvc_backend_slot {
    const char *name;
    int priority;
    const kvc_backend_t *desc; /* NULL when not loaded */
    void *dl;                  /* dlopen handle (modules only) */
    char origin[PATH_MAX];     /* "built-in" or module path */
    int built, loaded, num_devices, selected;
    char reason[256];
} kvc_backend_slot_t;

struct kvc_context {
    hwloc_topology_t topo;
    int topo_synthetic;
    kvc_pci_device_t gpus[KVC_MAX_GPUS];
    int num_gpus;

    kvc_backend_slot_t slots[KVC_MAX_BACKENDS];
    int num_slots;
    const kvc_backend_t *backend; /* selected */
    kvc_backend_ctx_t *bctx;
    kvc_backend_ops_t ops; /* resolved: no NULL slot */
    /* The CPU backend's table, kept by a context whose selected backend is a GPU (residence.c);
     * cpu_bctx is NULL on a CPU context. */
    kvc_backend_ops_t cpu_ops;
    kvc_backend_ctx_t *cpu_bctx;
    kvc_backend_services_t svc;

    kvc_isa_t isa;
    int num_threads;
    int device;
    kvc_recorder_t *recorder; /* completion and event records not drained yet */

    struct kvc_mem_registry *mem; /* live host allocations (hostmem.c) */
    struct kvc_device_registry *devmem; /* live kvc_device_alloc allocations (device.c) */
    struct kvc_codec_scratch *codec_scratch; /* codec buffers kept across calls (codec.c) */
};

/* codec.c: frees the context's codec scratch (kvc_context_destroy). */
void kvc_codec_scratch_free(struct kvc_codec_scratch *s);

/* The built-in CPU backend descriptor (src/backends/simd). */
extern const kvc_backend_t kvc_cpu_backend;

/* backend_registry.c */
kvc_status_t kvc_backends_discover(kvc_context_t *ctx, const char *forced, const char *module_path, int load_all);
void kvc_backends_unload(kvc_context_t *ctx);
/* Copy ops, replacing missing or NULL slots with stubs returning KVC_ERR_UNSUPPORTED. */
void kvc_ops_resolve(kvc_backend_ops_t *out, const kvc_backend_t *desc);
/* 1 when the ops carry both transfer_*_parts slots (a backend's own, not the stubs). */
int kvc_ops_have_parts(const kvc_backend_ops_t *ops);

/* residence.c: pick the op table of one call from where its data lives (docs/ARCHITECTURE.md). */
typedef struct kvc_res_ptr {
    const char *name;
    long long index; /* < 0: not an array element */
    const void *ptr;
} kvc_res_ptr_t;
typedef struct kvc_residence {
    kvc_context_t *ctx;
    const char *op;
    int by_kind;                    /* a GPU context whose module answers pointer_kind */
    kvc_res_ptr_t device, pageable; /* the first pointer of each kind seen */
    int registered;
} kvc_residence_t;
typedef struct kvc_route {
    const kvc_backend_ops_t *ops;
    kvc_backend_ctx_t *b;
    int on_gpu; /* the GPU module runs the call */
} kvc_route_t;
void kvc_res_init(kvc_residence_t *r, kvc_context_t *ctx, const char *op);
/* Adds one data pointer of the call (NULL is ignored); index >= 0 names an array element. */
void kvc_res_add(kvc_residence_t *r, const char *name, long long index, const void *p);
kvc_status_t kvc_res_route(const kvc_residence_t *r, kvc_route_t *out);
/* kvc_dequantise's checks and route alone (what it then calls to.ops->dequantise with): for the
 * codec, whose trusted dequantise on the CPU backend goes through src/backends/simd/cpu_codec.h. */
kvc_status_t kvc_dequantise_route(kvc_context_t *ctx, const kvc_quant_params_t *a, struct kvc_quant_args *op, kvc_route_t *to);
/* 1 when p is device memory on a GPU context whose module answers pointer_kind (index tables the
 * core then leaves to the module to validate). */
int kvc_res_on_device(kvc_context_t *ctx, const void *p);

/* transfer.c / rope.c: the single calls' validation, for plans (plan.c). Each validates its call
 * exactly as the public function does and fills the backend's argument struct; *empty is set when
 * nothing would move. Routing stays with the caller. */
kvc_status_t kvc_tokens_prepare(kvc_context_t *ctx, const kvc_token_transfer_t *a, int64_t chunk_rows,
                                struct kvc_token_plan *p, int *empty);
kvc_status_t kvc_blocks_prepare(kvc_context_t *ctx, const kvc_block_transfer_t *a, struct kvc_block_plan *p, int *empty);
kvc_status_t kvc_rope_fused_prepare(kvc_context_t *ctx, kvc_stream_t stream, const kvc_rope_keys_t *keys,
                                    const int64_t *old_positions, const int64_t *new_positions,
                                    const kvc_rope_table_t *table, struct kvc_rope_args *a, int *empty);
/* hostmem_copy.c: kvc_memcpy_async's checks of one copy (nbytes > 0; the alignment is checked). */
kvc_status_t kvc_copy_check(void *dst, const void *src, size_t nbytes, size_t host_buffer_offset,
                            size_t host_buffer_alignment);

/* recorder.c: the context's recorders (destroy frees records not drained; NULL is a no-op) */
kvc_status_t kvc_recorder_create(kvc_recorder_t **out);
void kvc_recorder_destroy(kvc_recorder_t *r);

/* device.c: frees what kvc_device_alloc handed out and was not freed (before the backend's fini). */
void kvc_device_teardown(kvc_context_t *ctx);

/* topology.c */
kvc_status_t kvc_topology_load(kvc_context_t *ctx);
void kvc_topology_unload(kvc_context_t *ctx);
int kvc_topology_has_vendor(const kvc_context_t *ctx, uint16_t vendor_id, char *first_bus_id, size_t len);

#endif
