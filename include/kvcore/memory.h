/* SPDX-License-Identifier: BSD-3-Clause */
/* Host memory: page-aligned, pinned, NUMA-placed, shared and hugepage allocations, and copies.
 *
 * One call allocates (kvc_mem_alloc, with a kvc_mem_params_t), one call frees by pointer
 * (kvc_mem_free): the context remembers size, kind, placement and registration. Placement is done
 * through hwloc and checked afterwards: a kvc_mem_report_t says what was obtained (page size,
 * pinned or not, NUMA node bound, where the pages are, which fallbacks were taken). A report never
 * claims more than the OS gave: "pinned" means every byte was page-locked, "bound" means the binding
 * call succeeded on the real machine. docs/MEMORY.md explains the model.
 * Thread safety: allocate, free, attach, query, the live list and the copies may be called from
 * any number of threads on one context at once (one lock per context guards its allocation list;
 * context.h). Freeing memory another thread still uses is the caller's race. */
#ifndef KVCORE_MEMORY_H
#define KVCORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- allocation */

/* Kind flags (combine with |). Combinations: PINNED, NUMA and HUGEPAGE combine freely; SHARED
 * combines with PINNED and NUMA but not with HUGEPAGE (tmpfs has no hugetlb pages):
 * KVC_ERR_INVALID_ARG. */
enum {
    KVC_MEM_PLAIN = 0,           /* page-aligned anonymous memory */
    KVC_MEM_PINNED = 1u << 0,    /* page-locked for DMA: mlock (CPU backend), host register (GPU) */
    KVC_MEM_NUMA = 1u << 1,      /* bound to the NUMA node chosen by kvc_mem_params_t.target */
    KVC_MEM_SHARED = 1u << 2,    /* named POSIX shared memory that another process can attach */
    KVC_MEM_HUGEPAGE = 1u << 3,  /* 2 MiB pages: hugetlb, else transparent hugepages (preferred policy) */
};
#define KVC_MEM_KIND_MASK 0xfu
/* Reported only (kind_obtained, kvc_mem_info_t.kind): a mapping of a file onto device memory made by
 * kvc_mem_map_file, such as a PCIe BAR through its sysfs resource file. */
#define KVC_MEM_DEVICE_FILE (1u << 4)

/* Which NUMA node a KVC_MEM_NUMA allocation goes to. */
typedef enum kvc_mem_target {
    KVC_MEM_TARGET_LOCAL = 0, /* node of the CPU the calling thread runs on when it calls */
    KVC_MEM_TARGET_NODE = 1,  /* node with OS index kvc_mem_params_t.node */
    KVC_MEM_TARGET_PCI = 2,   /* node nearest the PCI device kvc_mem_params_t.pci_bus_id (from hwloc) */
} kvc_mem_target_t;

/* What happens when the placement (NUMA node, hugepages) cannot be honoured. Pinning is never a
 * fallback: a KVC_MEM_PINNED request that cannot be pinned fails under both policies. */
typedef enum kvc_mem_policy {
    KVC_MEM_POLICY_PREFERRED = 0, /* fall back (unbound memory, smaller pages) and say so in the report;
                                     NUMA binding is MPOL_PREFERRED (or MPOL_PREFERRED_MANY on one node):
                                     pages spill to other nodes when full */
    KVC_MEM_POLICY_STRICT = 1,    /* fail: KVC_ERR_PLACEMENT (NUMA) or KVC_ERR_LIMIT (hugepages);
                                     NUMA binding is MPOL_BIND */
} kvc_mem_policy_t;

/* Bits of kvc_mem_params_t.field_mask: a field is read only when its bit is set. */
enum {
    KVC_MEM_PARAM_KIND = 1u << 0,      /* kind (default KVC_MEM_PLAIN) */
    KVC_MEM_PARAM_TARGET = 1u << 1,    /* target, node, pci_bus_id (default local); needs KVC_MEM_NUMA */
    KVC_MEM_PARAM_POLICY = 1u << 2,    /* policy (default preferred) */
    KVC_MEM_PARAM_NAME = 1u << 3,      /* name (required with KVC_MEM_SHARED, refused without) */
    KVC_MEM_PARAM_PIN_CHUNK = 1u << 4, /* pin_chunk (default KVC_MEM_DEFAULT_PIN_CHUNK) */
    KVC_MEM_PARAM_TOUCH = 1u << 5,     /* touch (default 1) */
    KVC_MEM_PARAM_RECLAIM = 1u << 6,   /* reclaim (default 0) */
};

#define KVC_MEM_DEFAULT_PIN_CHUNK ((size_t)1 << 30)

/* Longest shared memory name, the '/' included: glibc's shm_open refuses a name whose part after
 * the '/' is NAME_MAX - 1 (254) characters or longer. */
#define KVC_MEM_SHM_NAME_MAX 254

typedef struct kvc_mem_params {
    uint64_t field_mask;
    unsigned kind;              /* KVC_MEM_* flags */
    kvc_mem_target_t target;
    unsigned node;              /* KVC_MEM_TARGET_NODE: the node's OS index (any value; nodes past 63 work) */
    const char *pci_bus_id;     /* KVC_MEM_TARGET_PCI: "DDDD:BB:DD.F" or "BB:DD.F" */
    kvc_mem_policy_t policy;
    const char *name;           /* KVC_MEM_SHARED: "/name": at most KVC_MEM_SHM_NAME_MAX characters,
                                   printable ASCII, one leading '/' and no other, not "/." or "/.." */
    size_t pin_chunk;           /* KVC_MEM_PINNED: bytes per host-register call (a multiple of the page
                                   size); large pools are registered in chunks and rolled back fully on
                                   failure */
    int touch;                  /* 1: fault every page in now, in parallel, from threads bound to the
                                   target node (first touch places the pages); 0: leave pages to be
                                   faulted on first use (NUMA binding still applies) */
    int reclaim;                /* KVC_MEM_SHARED: 1 = a kvcore segment of this name whose creator died
                                   (nobody holds its owner lock; its owner record names that file) is
                                   unlinked and the name created afresh, for a restarted server; a live
                                   creator's segment, and any segment not proven kvcore's, is still
                                   KVC_ERR_EXISTS and left untouched */
} kvc_mem_params_t;

/* Page size obtained. */
typedef enum kvc_mem_pages {
    KVC_MEM_PAGES_NORMAL = 0,  /* base pages (4 KiB on x86-64) */
    KVC_MEM_PAGES_THP = 1,     /* base pages with MADV_HUGEPAGE: the kernel may back them with 2 MiB pages
                                  (huge_bytes says how much it did) */
    KVC_MEM_PAGES_HUGETLB = 2, /* explicit 2 MiB hugetlb pages */
} kvc_mem_pages_t;

/* Fallbacks taken (kvc_mem_report_t.fallbacks); only the preferred policy takes any. */
enum {
    KVC_MEM_FALLBACK_NO_SUCH_NODE = 1u << 0,     /* target node / PCI device not in the topology: not bound */
    KVC_MEM_FALLBACK_NOT_THIS_SYSTEM = 1u << 1,  /* topology loaded from XML/synthetic: binding is not real */
    KVC_MEM_FALLBACK_BIND_REFUSED = 1u << 2,     /* the OS refused the binding (EPERM, ENOSYS, EINVAL) */
    KVC_MEM_FALLBACK_NO_HUGETLB = 1u << 3,       /* not enough free 2 MiB hugetlb pages: THP instead */
    KVC_MEM_FALLBACK_NO_THP = 1u << 4,           /* transparent hugepages disabled too: normal pages */
    KVC_MEM_FALLBACK_TOUCH_UNBOUND = 1u << 5,    /* first-touch threads could not be bound to the node's
                                                    CPUs (the binding still places the pages) */
};

/* Pages found on one NUMA node. */
typedef struct kvc_mem_node_pages {
    unsigned os_index;
    uint64_t pages; /* sampled pages on that node (see pages_sampled) */
} kvc_mem_node_pages_t;

#define KVC_MEM_REPORT_NODES 16
#define KVC_MEM_LOCATION_SAMPLES 4096

/* What an allocation obtained. Filled by kvc_mem_alloc / kvc_mem_attach and kvc_mem_query. */
typedef struct kvc_mem_report {
    size_t size;             /* bytes requested (attach: the segment's size) */
    size_t mapped_size;      /* bytes mapped: size rounded up to page_size */
    unsigned kind_requested; /* KVC_MEM_* flags asked for */
    unsigned kind_obtained;  /* KVC_MEM_PINNED only when pinned, KVC_MEM_NUMA only when bound,
                                KVC_MEM_HUGEPAGE for hugetlb or THP, KVC_MEM_SHARED for shm */
    kvc_mem_policy_t policy;
    size_t page_size;        /* guaranteed page size: 2 MiB for hugetlb, the base page otherwise */
    kvc_mem_pages_t pages_kind;
    size_t huge_bytes;       /* bytes backed by huge pages when queried (hugetlb: all; THP: from
                                /proc/self/smaps AnonHugePages; else 0) */
    int pinned;              /* 1 only when every byte is page-locked */
    unsigned pin_calls;      /* host-register calls made (chunks) */
    int numa_requested;      /* OS index of the node asked for (resolved from local / PCI), -1 none or
                                unresolvable */
    int numa_bound;          /* OS index the memory is bound to, -1 when not bound */
    /* Where the pages are, from hwloc_get_area_memlocation (HWLOC_MEMBIND_BYNODESET) on up to
     * KVC_MEM_LOCATION_SAMPLES pages evenly spread over the range (every page when there are fewer). */
    uint64_t pages_total;    /* mapped_size / base page size */
    uint64_t pages_sampled;
    uint64_t pages_unplaced; /* sampled pages not resident (never touched, or location unknown) */
    unsigned location_count; /* distinct nodes holding sampled pages (location[] lists the first
                                KVC_MEM_REPORT_NODES by OS index) */
    kvc_mem_node_pages_t location[KVC_MEM_REPORT_NODES];
    int location_known;      /* 0 when hwloc cannot tell (XML topology, unsupported OS) */
    uint32_t fallbacks;      /* KVC_MEM_FALLBACK_* */
    char fallback_text[512]; /* one sentence per fallback, "" when none */
    int attached;            /* 1 for a mapping made by kvc_mem_attach */
    char name[256];          /* shared memory name, "" otherwise */
} kvc_mem_report_t;

/* Allocate `size` bytes (> 0) as `params` asks (NULL: plain, touched). The pointer is aligned to
 * page_size (4 KiB at least). report may be NULL; when given it is filled, location included (a
 * query costing up to KVC_MEM_LOCATION_SAMPLES system calls). *out is set only on success.
 * Errors: KVC_ERR_INVALID_ARG (bad flags, combination, name, pin_chunk; target without NUMA),
 * KVC_ERR_PLACEMENT (strict NUMA placement impossible: unknown node or device, XML topology, binding
 * refused by the OS, more bytes than the node has; the message says which), KVC_ERR_LIMIT (strict
 * hugepages with too few free hugetlb pages; RLIMIT_MEMLOCK too low for pinning: the message gives
 * the limit and the request),
 * KVC_ERR_EXISTS (shared name exists: never shared; the message says whether it is in use,
 * abandoned, another user's or not a kvcore segment; with reclaim, an abandoned segment proven
 * kvcore's by its owner record is replaced instead, anything else left untouched), KVC_ERR_NO_SPACE (shared memory filesystem
 * too small: checked by reserving the space up front, so a full /dev/shm never means a SIGBUS
 * later), KVC_ERR_NO_MEMORY (mapping or faulting in failed), KVC_ERR_PERMISSION, KVC_ERR_BACKEND
 * (GPU host register). Pinning is never a fallback: it fails under both policies. */
KVC_API kvc_status_t kvc_mem_alloc(kvc_context_t *ctx, size_t size, const kvc_mem_params_t *params, void **out,
                                   kvc_mem_report_t *report);

/* Free (or detach) memory from kvc_mem_alloc / kvc_mem_attach: unpins, unmaps, and unlinks a shared
 * segment when the caller's process created it. Unknown pointer or double free: KVC_ERR_STATE, and
 * nothing is touched. Freed ranges stay reserved (PROT_NONE) so their addresses are not reused: a
 * double free is detected even when other allocations were made since, for the context's last 1024
 * frees (up to 1 TiB) and when RLIMIT_AS is unlimited (docs/MEMORY.md). NULL is a no-op. */
KVC_API kvc_status_t kvc_mem_free(kvc_context_t *ctx, void *ptr);

/* Map a shared segment created by kvc_mem_alloc(KVC_MEM_SHARED) in any process, by name. kind is
 * 0, KVC_MEM_SHARED or KVC_MEM_SHARED|KVC_MEM_PINNED. *size receives the segment's size (may be
 * NULL). Detach with kvc_mem_free (never unlinks). A complete segment attaches whether its creator
 * lives or not. KVC_ERR_NOT_FOUND (no such name, or an empty segment nobody owns: its creator died
 * while reserving it, or it is not a kvcore segment), KVC_ERR_STATE (empty and its creator, holding
 * the segment's owner lock, is still reserving it: retry), KVC_ERR_PERMISSION. */
KVC_API kvc_status_t kvc_mem_attach(kvc_context_t *ctx, const char *name, unsigned kind, void **out, size_t *size,
                                    kvc_mem_report_t *report);

/* Map `size` bytes at byte `offset` of the file `path` shared and writable: a device's memory
 * exposed through a file, typically a PCIe BAR's sysfs resource file
 * (/sys/bus/pci/devices/DDDD:BB:DD.F/resourceN; LMCache's alloc_pcie_bar_ptr). kind is 0 or
 * KVC_MEM_PINNED: pinned registers the mapping with the backend as I/O memory so GPU kernels reach
 * it (CUDA/HIP host register Mapped | IoMemory; the CPU backend locks it). Unmap with kvc_mem_free
 * (the file is left alone). offset must be a multiple of the page size and offset + size within the
 * file's size (a resource file's size is the BAR's length). KVC_ERR_INVALID_ARG (NULL, size 0, bad
 * kind, unaligned offset, not a regular or sysfs file: a directory, FIFO, socket or device node),
 * KVC_ERR_NOT_FOUND, KVC_ERR_PERMISSION, KVC_ERR_OUT_OF_RANGE (beyond the end of the file),
 * KVC_ERR_NO_MEMORY (mmap refused), KVC_ERR_UNSUPPORTED (pinned on a GPU module without I/O
 * memory registration), KVC_ERR_BACKEND (the registration failed). */
KVC_API kvc_status_t kvc_mem_map_file(kvc_context_t *ctx, const char *path, size_t size, size_t offset, unsigned kind,
                                      void **out, kvc_mem_report_t *report);
/* Report of a live allocation (location and THP usage re-read now). KVC_ERR_STATE if ptr is not
 * the start of a live allocation. */
KVC_API kvc_status_t kvc_mem_query(kvc_context_t *ctx, const void *ptr, kvc_mem_report_t *out);

/* Live allocations, for leak accounting: kvc_context_destroy logs each (warn level) and frees it. */
typedef struct kvc_mem_info {
    void *ptr;
    size_t size;
    unsigned kind;     /* kind obtained */
    int numa_node;     /* node bound, -1 when not bound */
    int pinned;
    int attached;
    char name[256];    /* shared memory name, "" otherwise */
} kvc_mem_info_t;

KVC_API size_t kvc_mem_live_count(kvc_context_t *ctx);
/* index in [0, kvc_mem_live_count) in allocation order, newest first. */
KVC_API kvc_status_t kvc_mem_live_get(kvc_context_t *ctx, size_t index, kvc_mem_info_t *out);

/* "plain", or the flags joined by '|' ("pinned|numa|hugepage"). Returns buf. */
KVC_API const char *kvc_mem_kind_name(unsigned kind, char *buf, size_t len);

/* ---------------------------------------------------------------- copies */

/* LMCache lmcache_memcpy_async: copy nbytes from src to dst on `stream`, split so that no piece
 * crosses a multiple of host_buffer_alignment in the host buffer's offset space (the host buffer
 * starts host_buffer_offset bytes into a pool registered in host_buffer_alignment-sized pieces).
 * host_buffer_alignment must be a power of two > 0 (KVC_ERR_INVALID_ARG otherwise, also for
 * nbytes 0). The ranges must not overlap (KVC_ERR_INVALID_ARG). Synchronous on the CPU backend. */
KVC_API kvc_status_t kvc_memcpy_async(kvc_context_t *ctx, void *dst, const void *src, size_t nbytes,
                                      kvc_direction_t direction, size_t host_buffer_offset,
                                      size_t host_buffer_alignment, kvc_stream_t stream);

/* count copies dsts[i] <- srcs[i] of sizes[i] bytes, in parallel over entries and within large
 * ones. Zero sizes are skipped (their pointers may be NULL); a NULL pointer with a nonzero size is
 * KVC_ERR_INVALID_ARG naming the index. Within one entry src and dst may overlap (memmove). Across
 * entries, a destination overlapping another entry's source or destination would make the result
 * depend on thread timing: KVC_ERR_INVALID_ARG naming both entries, and nothing is copied. */
KVC_API kvc_status_t kvc_batched_memcpy(kvc_context_t *ctx, void *const *dsts, const void *const *srcs,
                                        const size_t *sizes, size_t count, kvc_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
