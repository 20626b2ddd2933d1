/* Backend ABI: what a backend (the built-in CPU backend, or a dlopen'ed GPU module) provides.
 *
 * A module exports exactly one symbol, kvc_backend_entry, returning a pointer to a const
 * kvc_backend_t. The core checks abi_version before touching anything else. Every op receives
 * arguments the core has already validated (shapes, ranges, sizes): backends only do the work, so
 * every device returns the same errors for the same bad call.
 *
 * ABI rules: KVC_BACKEND_ABI_VERSION changes when an existing slot changes meaning or signature.
 * New slots are appended to kvc_backend_ops_t; struct_size tells the core how many slots a module
 * has, and slots a module lacks (or leaves NULL) are resolved to a stub returning
 * KVC_ERR_UNSUPPORTED, so the core never calls through NULL. This number is independent of the
 * library's libtool version. */
#ifndef KVCORE_BACKEND_H
#define KVCORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_BACKEND_ABI_VERSION 1u

/* Priorities (higher wins among usable backends): GPU backends above the CPU fallback. */
#define KVC_BACKEND_PRIORITY_CUDA 50
#define KVC_BACKEND_PRIORITY_HIP 40
#define KVC_BACKEND_PRIORITY_CPU 10

/* Name of the single symbol a module exports. */
#define KVC_BACKEND_ENTRY_SYMBOL "kvc_backend_entry"

typedef struct kvc_backend_ctx kvc_backend_ctx_t; /* a backend's own per-context state */

/* Operation argument structs, defined in the topic headers (all validated by the core). */
struct kvc_copy_split;         /* memory.h: async copy split at host-buffer alignment */
struct kvc_batched_copy;       /* memory.h: list of (dst, src, size) */
struct kvc_token_plan;         /* transfer.h: per-token transfer on an explicit stride plan */
struct kvc_block_plan;         /* transfer.h: per-block transfer on an explicit stride plan */
struct kvc_cdf_args;           /* cachegen.h */
struct kvc_encode_args;        /* cachegen.h */
struct kvc_decode_args;        /* cachegen.h */
struct kvc_decode_packed_args; /* cachegen.h */
struct kvc_quant_args;         /* cachegen.h: quantise / dequantise */
struct kvc_rope_args;          /* rope.h: fused old->new re-rotation with a cos/sin table */
struct kvc_rope_cache_args;    /* rope.h: cos/sin table construction */
struct kvc_rope_delta_args;    /* rope.h: table-free rotation by the position delta */

typedef void (*kvc_host_fn_t)(void *arg);

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
    int cpu_isa;     /* CPU SIMD tier chosen for the context (src/core/isa.h values) */
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

#ifdef __cplusplus
}
#endif
#endif
