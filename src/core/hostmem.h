/* SPDX-License-Identifier: BSD-3-Clause */
/* Host memory internals shared by hostmem*.c: the per-context registry of live allocations, and
 * the mapping, placement and shared-memory steps. */
#ifndef KVC_CORE_HOSTMEM_H
#define KVC_CORE_HOSTMEM_H

#include <pthread.h>
#include <sys/types.h>

#include <kvcore/memory.h>

#include "internal.h"

#define KVC_HUGE_2M ((size_t)2 << 20)

/* One live allocation. ptr is the start of its mapping (mapped_size bytes). */
typedef struct kvc_mem_block {
    struct kvc_mem_block *next;
    void *ptr;
    size_t size, mapped_size;
    unsigned kind_requested, kind_obtained;
    kvc_mem_policy_t policy;
    kvc_mem_pages_t pages_kind;
    size_t page_size;   /* guaranteed page size */
    size_t pin_chunk;   /* bytes per host-register call */
    unsigned pin_calls; /* chunks registered (0: not pinned) */
    int numa_requested, numa_bound;
    uint32_t fallbacks;
    char fallback_text[512];
    int attached;
    pid_t creator_pid;  /* shared memory: only this process unlinks the name */
    int owner_fd;       /* shared memory created here: the segment's fd holding the owner lock, else -1 */
    char name[256];
} kvc_mem_block_t;

/* Freed ranges stay reserved (PROT_NONE, no memory behind them) so no later mapping can take the
 * address: a second kvc_mem_free of it is then known to be a double free, even across threads.
 * The oldest range is unmapped beyond these bounds (docs/MEMORY.md). */
#define KVC_MEM_QUARANTINE_RANGES 1024
#define KVC_MEM_QUARANTINE_BYTES ((size_t)1 << 40)

typedef struct kvc_mem_registry {
    pthread_mutex_t lock;
    kvc_mem_block_t *head; /* newest first */
    size_t count;
    struct {
        void *ptr;
        size_t len;
    } quarantine[KVC_MEM_QUARANTINE_RANGES]; /* a ring, oldest at qfirst */
    size_t qfirst, qcount, qbytes;
} kvc_mem_registry_t;

/* hostmem.c: called from kvc_context_create / kvc_context_destroy. */
kvc_status_t kvc_hostmem_init(kvc_context_t *ctx);
/* Logs (warn) and frees every allocation still live, then the registry. */
void kvc_hostmem_teardown(kvc_context_t *ctx);

/* hostmem_place.c: NUMA target resolution, binding, parallel first touch, the placement report. */
typedef struct kvc_placement {
    hwloc_obj_t node; /* NUMA node to bind to, NULL when not binding */
} kvc_placement_t;

/* Resolve the target of a KVC_MEM_NUMA request into pl->node, or record a fallback in b
 * (preferred) / return KVC_ERR_PLACEMENT (strict). KVC_ERR_INVALID_ARG for a malformed PCI id. */
kvc_status_t kvc_place_resolve(kvc_context_t *ctx, const kvc_mem_params_t *p, kvc_mem_block_t *b, kvc_placement_t *pl);
/* Bind [addr, addr+len) to pl->node (MPOL_BIND when strict, MPOL_PREFERRED otherwise). On refusal:
 * strict → KVC_ERR_PLACEMENT; preferred → fallback recorded, pl->node cleared, KVC_OK. */
kvc_status_t kvc_place_bind(kvc_context_t *ctx, kvc_mem_block_t *b, kvc_placement_t *pl, void *addr, size_t len);
/* Fault every page in (pages of `step` bytes), in parallel from threads bound to pl->node's CPUs
 * (when binding). KVC_ERR_NO_MEMORY when the kernel cannot provide the pages. */
kvc_status_t kvc_place_touch(kvc_context_t *ctx, kvc_mem_block_t *b, const kvc_placement_t *pl, size_t step);
/* Fill the location fields of a report from hwloc_get_area_memlocation. */
void kvc_place_locate(kvc_context_t *ctx, const kvc_mem_block_t *b, kvc_mem_report_t *r);
/* Append one sentence to b->fallback_text and set the flag. */
void kvc_mem_fallback(kvc_mem_block_t *b, uint32_t flag, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* hostmem_shm.c: POSIX shared memory. */
kvc_status_t kvc_shm_check_name(const char *name);
/* shm_open(O_CREAT|O_EXCL, 0600), take the owner lock (flock LOCK_EX on *fd, which the caller keeps
 * open until the segment is freed), write the owner record and map map_len bytes of the still empty
 * segment. An existing name is KVC_ERR_EXISTS, saying whether it is in use, abandoned or not a
 * kvcore segment; with reclaim, an abandoned segment (no lock holder, and an owner record naming
 * that very file) is unlinked and the name created afresh; anything else is never touched. */
kvc_status_t kvc_shm_create_map(const char *name, size_t map_len, int reclaim, int *fd, void **addr);
/* Reserve the space (posix_fallocate) so that a full filesystem is an error now, not a SIGBUS
 * later; the size becomes visible to attachers only once all of it is reserved. fd stays open. */
kvc_status_t kvc_shm_reserve(const char *name, int fd, size_t size);
/* Remove the owner record of `name` (with the segment, by its creator). */
void kvc_shm_record_remove(const char *name);
/* Undo kvc_shm_create_map: unmap, unlink, close (fd >= 0; drops the lock). */
void kvc_shm_abort(const char *name, int fd, void *addr, size_t map_len);
/* Map an existing segment; *size is its size, *map_len the mapped length. */
kvc_status_t kvc_shm_attach_map(const char *name, void **addr, size_t *size, size_t *map_len);

#endif
