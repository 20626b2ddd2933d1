/* SPDX-License-Identifier: BSD-3-Clause */
/* Context: loads the topology once, discovers backends, selects one. Every op takes a context.
 *
 * Thread safety (the rule every topic header refers to): one context may be shared by any number
 * of threads. Every call that takes a context may run at the same time as any other call on the
 * same context (the allocation lists and the record queues have their own locks; everything else
 * is fixed when the context is created), except kvc_context_destroy, which must not overlap any
 * other call on that context. kvc_context_create may run concurrently. kvc_last_error is per
 * thread. kvcore adds no ordering between concurrent calls: two calls writing the same memory race
 * as any two writers do; on GPU backends work is ordered per stream, not per thread. */
#ifndef KVCORE_CONTEXT_H
#define KVCORE_CONTEXT_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvc_context kvc_context_t;

/* Opaque stream of the selected backend (cudaStream_t / hipStream_t on GPU backends).
 * NULL means the backend's default stream; on the CPU backend every op is synchronous. */
typedef void *kvc_stream_t;

/* Bits of kvc_context_params_t.field_mask: a field is read only when its bit is set, so the struct
 * can grow without breaking callers built against older headers. */
enum {
    KVC_CONTEXT_PARAM_BACKEND = 1u << 0,      /* backend: "auto", "cpu", "cuda", "hip" */
    KVC_CONTEXT_PARAM_DEVICE = 1u << 1,       /* device ordinal within the backend */
    KVC_CONTEXT_PARAM_MODULE_PATH = 1u << 2,  /* directory holding kvcore_<name>.so */
    KVC_CONTEXT_PARAM_LOAD_ALL = 1u << 3,     /* open every module even without a matching device */
    KVC_CONTEXT_PARAM_NUM_THREADS = 1u << 4,  /* CPU threads for OpenMP work (0 = OpenMP default) */
};

/* Thread counts (params.num_threads, KVCORE_NUM_THREADS, or the OpenMP default) are capped at this
 * many per CPU the process may use (its affinity mask, lowered to its cgroup CPU quota rounded
 * up), then at the team size that can be created right now (RLIMIT_NPROC, RLIMIT_AS, threads-max:
 * tried with plain threads, since OpenMP ends the process when it cannot create one). A request
 * above either is lowered with a warning, not refused; kvc_context_num_threads() gives the count
 * in use. The team size is tried once per process, from the thread creating the context; OpenMP
 * keeps one pool per calling thread, so several threads running parallel ops at once need that
 * many pools, which the check does not cover under a tight RLIMIT_NPROC. */
#define KVC_THREADS_PER_CPU 4

typedef struct kvc_context_params {
    uint64_t field_mask;
    const char *backend;     /* overrides KVCORE_BACKEND when set */
    int device;
    const char *module_path; /* overrides KVCORE_MODULE_PATH when set */
    int load_all_modules;
    int num_threads;
} kvc_context_params_t;

/* Create a context. params may be NULL (all defaults; environment knobs apply).
 * A forced backend (params or KVCORE_BACKEND) that cannot start is an error, never a silent
 * fallback: KVC_ERR_NOT_FOUND (module file missing), KVC_ERR_ABI (module for another ABI),
 * KVC_ERR_NO_DEVICE (module loaded, no device), KVC_ERR_INVALID_ARG (unknown backend name).
 * kvc_last_error() then says why and what to do. *out is set only on success. */
KVC_API kvc_status_t kvc_context_create(const kvc_context_params_t *params, kvc_context_t **out);

/* Destroy a context; reports (log level warn) and frees every host allocation still live. NULL is a no-op. */
KVC_API void kvc_context_destroy(kvc_context_t *ctx);

/* Name of the selected backend ("cpu", "cuda", "hip"). */
KVC_API const char *kvc_context_backend_name(const kvc_context_t *ctx);

/* Wait until all work queued on `stream` is done (CPU backend: returns at once). */
KVC_API kvc_status_t kvc_stream_synchronize(kvc_context_t *ctx, kvc_stream_t stream);

/* Memory of the selected backend's device (device memory on GPU backends, 64-byte aligned host
 * memory on the CPU backend), so the same code can feed any backend's ops. size 0 or NULL out:
 * KVC_ERR_INVALID_ARG; KVC_ERR_NO_MEMORY when the device is full. The context keeps a list of its
 * allocations: freeing a pointer it did not hand out (or twice) is KVC_ERR_STATE and touches
 * nothing; kvc_context_destroy frees what is left (and logs a warning). NULL is a no-op. */
KVC_API kvc_status_t kvc_device_alloc(kvc_context_t *ctx, size_t size, void **out);
KVC_API kvc_status_t kvc_device_free(kvc_context_t *ctx, void *ptr);

/* Synchronous copy of nbytes between any two addresses the backend can reach (host, pinned or
 * device memory, in any direction; the GPU runtime tells them apart). Waits for the copy, and on
 * GPU backends it is ordered after work on the default stream. Overlapping ranges are allowed on
 * the CPU backend only (memmove). nbytes 0 is a no-op; a NULL pointer with nbytes > 0, nbytes above
 * PTRDIFF_MAX (a negative size converted to size_t) and a range that wraps around the address space
 * are KVC_ERR_INVALID_ARG, with nothing copied. */
KVC_API kvc_status_t kvc_memcpy(kvc_context_t *ctx, void *dst, const void *src, size_t nbytes);

/* PCI bus id ("DDDD:BB:DD.F", lower case) of a device of the selected GPU backend, from its
 * runtime. buf needs at least 16 bytes. KVC_ERR_UNSUPPORTED on the CPU backend. */
KVC_API kvc_status_t kvc_device_pci_bus_id(kvc_context_t *ctx, int device, char *buf, size_t len);

/* Detailed message of the last error detected on this thread (like dlerror); "" if none. */
KVC_API const char *kvc_last_error(void);

/* ---- introspection (used by `kvcore info`) ---- */

typedef struct kvc_backend_info {
    const char *name;      /* "cpu", "cuda", "hip" */
    const char *origin;    /* "built-in" or the module's file path */
    int priority;          /* higher wins among usable backends */
    int built;             /* module file was found (built-in backends: 1) */
    int loaded;            /* dlopen + ABI check succeeded */
    int num_devices;       /* from the backend's probe (CPU: 1) */
    int selected;          /* this context uses it */
    const char *reason;    /* why it was or was not selected */
} kvc_backend_info_t;

KVC_API int kvc_context_backend_count(const kvc_context_t *ctx);
KVC_API kvc_status_t kvc_context_backend_info(const kvc_context_t *ctx, int index, kvc_backend_info_t *out);

/* CPU instruction set tier used by the CPU backend ("scalar", "avx2", "avx512", "neon"). */
KVC_API const char *kvc_context_isa(const kvc_context_t *ctx);

/* Threads the CPU backend uses for OpenMP regions (after the caps of KVC_THREADS_PER_CPU). */
KVC_API int kvc_context_num_threads(const kvc_context_t *ctx);

/* CPU transfers moving more bytes than this write with streaming stores: KVCORE_STREAM_MIN_BYTES,
 * else 3/4 of the last-level cache of kvc_llc_info(), at least 4 MiB. -1 when ctx is NULL. */
KVC_API int64_t kvc_context_stream_min_bytes(const kvc_context_t *ctx);

/* Environment knobs: one table, printed by `kvcore info`. */
typedef struct kvc_env_knob {
    const char *name;
    const char *default_value;
    const char *help;
    const char *value; /* current value from the environment, NULL when unset */
} kvc_env_knob_t;

KVC_API size_t kvc_env_knob_count(void);
KVC_API kvc_status_t kvc_env_knob_get(size_t index, kvc_env_knob_t *out);

/* Build options compiled into this library, as "name=value" lines separated by '\n'. */
KVC_API const char *kvc_build_config(void);

#ifdef __cplusplus
}
#endif
#endif
