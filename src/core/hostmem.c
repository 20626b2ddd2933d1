/* SPDX-License-Identifier: BSD-3-Clause */
/* Host memory API: one allocation call, one free call by pointer, shared-memory attach, reports,
 * and the per-context registry that remembers every live allocation (leaks are reported and freed
 * at context destroy). Placement steps live in hostmem_place.c, shared memory in hostmem_shm.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostmem.h"
#include "sysinfo.h"

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26) /* log2(2 MiB) << MAP_HUGE_SHIFT */
#endif

#define KNOWN_PARAMS                                                                                             \
    (KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_TARGET | KVC_MEM_PARAM_POLICY | KVC_MEM_PARAM_NAME |                     \
     KVC_MEM_PARAM_PIN_CHUNK | KVC_MEM_PARAM_TOUCH | KVC_MEM_PARAM_RECLAIM)

static size_t base_page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

kvc_status_t kvc_hostmem_init(kvc_context_t *ctx)
{
    kvc_mem_registry_t *r = calloc(1, sizeof(*r));
    if (!r) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the memory registry");
    pthread_mutex_init(&r->lock, NULL);
    ctx->mem = r;
    return KVC_OK;
}

KVC_API const char *kvc_mem_kind_name(unsigned kind, char *buf, size_t len)
{
    static const char *const names[] = { "pinned", "numa", "shared", "hugepage", "device-file" };
    if (!buf || !len) return buf;
    buf[0] = '\0';
    size_t used = 0;
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (kind & (1u << i))
            used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? "|" : "", names[i]);
    if (!used) snprintf(buf, len, "plain");
    return buf;
}

/* ---------------------------------------------------------------- validation */

static kvc_status_t check_params(const kvc_mem_params_t *p, size_t size, unsigned *kind)
{
    const uint64_t mask = p ? p->field_mask : 0;
    if (mask & ~(uint64_t)KNOWN_PARAMS)
        return kvc_error(KVC_ERR_INVALID_ARG,
                         "params.field_mask has unknown bits 0x%" PRIx64 " (built against a newer kvcore?)",
                         mask & ~(uint64_t)KNOWN_PARAMS);
    *kind = (mask & KVC_MEM_PARAM_KIND) ? p->kind : KVC_MEM_PLAIN;
    if (*kind & ~KVC_MEM_KIND_MASK)
        return kvc_error(KVC_ERR_INVALID_ARG, "params.kind 0x%x has unknown flags 0x%x", *kind, *kind & ~KVC_MEM_KIND_MASK);
    if ((*kind & KVC_MEM_SHARED) && (*kind & KVC_MEM_HUGEPAGE))
        return kvc_error(KVC_ERR_INVALID_ARG, "KVC_MEM_SHARED cannot be combined with KVC_MEM_HUGEPAGE: shared memory "
                                              "lives in tmpfs, which has no hugetlb pages");
    if (size == 0) return kvc_error(KVC_ERR_INVALID_ARG, "size is 0");
    if (size > SIZE_MAX / 2) return kvc_error(KVC_ERR_INVALID_ARG, "size %zu is larger than any address space", size);
    if ((mask & KVC_MEM_PARAM_TARGET) && !(*kind & KVC_MEM_NUMA))
        return kvc_error(KVC_ERR_INVALID_ARG, "params.target is set but params.kind lacks KVC_MEM_NUMA");
    if (mask & KVC_MEM_PARAM_TARGET) {
        if (p->target != KVC_MEM_TARGET_LOCAL && p->target != KVC_MEM_TARGET_NODE && p->target != KVC_MEM_TARGET_PCI)
            return kvc_error(KVC_ERR_INVALID_ARG, "params.target %d is not a kvc_mem_target_t", (int)p->target);
        if (p->target == KVC_MEM_TARGET_PCI && !p->pci_bus_id)
            return kvc_error(KVC_ERR_INVALID_ARG, "params.target is KVC_MEM_TARGET_PCI but params.pci_bus_id is NULL");
    }
    if ((mask & KVC_MEM_PARAM_POLICY) && p->policy != KVC_MEM_POLICY_PREFERRED && p->policy != KVC_MEM_POLICY_STRICT)
        return kvc_error(KVC_ERR_INVALID_ARG, "params.policy %d is not a kvc_mem_policy_t", (int)p->policy);
    const int named = (mask & KVC_MEM_PARAM_NAME) && p->name;
    if ((*kind & KVC_MEM_SHARED) && !named)
        return kvc_error(KVC_ERR_INVALID_ARG, "KVC_MEM_SHARED needs params.name (\"/name\")");
    if (!(*kind & KVC_MEM_SHARED) && named)
        return kvc_error(KVC_ERR_INVALID_ARG, "params.name is set but params.kind lacks KVC_MEM_SHARED");
    if ((mask & KVC_MEM_PARAM_RECLAIM) && p->reclaim && !(*kind & KVC_MEM_SHARED))
        return kvc_error(KVC_ERR_INVALID_ARG, "params.reclaim applies to KVC_MEM_SHARED only");
    if (named) {
        kvc_status_t st = kvc_shm_check_name(p->name);
        if (st != KVC_OK) return st;
    }
    if ((mask & KVC_MEM_PARAM_PIN_CHUNK) && (p->pin_chunk == 0 || p->pin_chunk % base_page() != 0))
        return kvc_error(KVC_ERR_INVALID_ARG, "params.pin_chunk %zu is not a positive multiple of the page size %zu",
                         p->pin_chunk, base_page());
    return KVC_OK;
}

/* ---------------------------------------------------------------- pinning */

static void unpin_block(kvc_context_t *ctx, kvc_mem_block_t *b)
{
    for (unsigned i = b->pin_calls; i-- > 0;) {
        const size_t off = (size_t)i * b->pin_chunk;
        const size_t len = b->mapped_size - off < b->pin_chunk ? b->mapped_size - off : b->pin_chunk;
        if (ctx->ops.host_unregister(ctx->bctx, (char *)b->ptr + off, len) != KVC_OK)
            KVC_WARN("unpinning %zu bytes at %p failed: %s", len, (void *)((char *)b->ptr + off), kvc_last_error());
    }
    b->pin_calls = 0;
}

typedef kvc_status_t (*register_fn)(kvc_backend_ctx_t *b, void *ptr, size_t len);

/* Register the whole mapping in chunks with `reg` (host_register, or host_register_io for a device
 * file); on failure release the chunks already registered. */
static kvc_status_t pin_block(kvc_context_t *ctx, kvc_mem_block_t *b, register_fn reg)
{
    b->pin_chunk = round_up(b->pin_chunk, b->page_size);
    const size_t total = b->mapped_size, chunk = b->pin_chunk;
    const unsigned n = (unsigned)((total + chunk - 1) / chunk);
    for (unsigned i = 0; i < n; i++) {
        const size_t off = (size_t)i * chunk, len = total - off < chunk ? total - off : chunk;
        const kvc_status_t st = reg(ctx->bctx, (char *)b->ptr + off, len);
        if (st != KVC_OK) {
            char why[512];
            snprintf(why, sizeof(why), "%s", kvc_last_error());
            unpin_block(ctx, b);
            return kvc_error(st, "pinning %zu bytes failed at chunk %u of %u (%zu bytes at offset %zu; %u chunk(s) "
                                 "already pinned were released): %s", total, i + 1, n, len, off, i, why);
        }
        b->pin_calls = i + 1;
    }
    return KVC_OK;
}

/* A registry entry for a mapping of something that exists already (a shared segment to attach, a
 * device file): never unlinked by us, not placed, base pages. */
static kvc_mem_block_t *new_attached_block(const char *name, unsigned kind_requested, unsigned kind_obtained)
{
    kvc_mem_block_t *b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    snprintf(b->name, sizeof(b->name), "%s", name);
    b->kind_requested = kind_requested;
    b->kind_obtained = kind_obtained;
    b->attached = 1;
    b->creator_pid = -1;
    b->owner_fd = -1;
    b->numa_requested = b->numa_bound = -1;
    b->page_size = base_page();
    b->pin_chunk = KVC_MEM_DEFAULT_PIN_CHUNK;
    return b;
}

/* ---------------------------------------------------------------- mapping */

static void *map_anon(size_t len, int extra_flags)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Free 2 MiB hugetlb pages not promised to other mappings. */
static uint64_t hugetlb_available(void)
{
    kvc_hugepage_pool_t pools[8];
    const int n = kvc_hugepage_pools(pools, 8);
    for (int i = 0; i < n && i < 8; i++)
        if (pools[i].page_size == KVC_HUGE_2M) return pools[i].free > pools[i].reserved ? pools[i].free - pools[i].reserved : 0;
    return 0;
}

/* Explicit 2 MiB hugetlb pages, or NULL with the reason in why. */
static void *map_hugetlb(kvc_mem_block_t *b, const kvc_placement_t *pl, char *why, size_t whylen)
{
    const uint64_t need = b->mapped_size / KVC_HUGE_2M;
    /* The kernel reserves hugetlb pages machine-wide, ignoring the binding: a strict (MPOL_BIND)
     * mapping on a node short of pages would SIGBUS at first touch, so check the node first. */
    if (pl->node && b->policy == KVC_MEM_POLICY_STRICT) {
        const int64_t on_node = kvc_sys_node_free_hugepages(pl->node->os_index, KVC_HUGE_2M);
        if (on_node >= 0 && (uint64_t)on_node < need) {
            snprintf(why, whylen, "NUMA node %u has %" PRId64 " free 2 MiB hugetlb pages, %" PRIu64 " needed",
                     pl->node->os_index, on_node, need);
            return NULL;
        }
    }
    void *p = map_anon(b->mapped_size, MAP_HUGETLB | MAP_HUGE_2MB);
    if (!p) {
        const int err = errno;
        snprintf(why, whylen, "%" PRIu64 " free 2 MiB hugetlb pages, %" PRIu64 " needed (%s)", hugetlb_available(),
                 need, strerror(err));
    }
    return p;
}

/* Normal pages aligned to 2 MiB and marked MADV_HUGEPAGE, so the kernel can use huge pages;
 * *marked says whether the kernel took the advice. */
static void *map_thp(size_t len, int *marked)
{
    char *raw = map_anon(len + KVC_HUGE_2M, 0);
    if (!raw) return NULL;
    char *p = (char *)round_up((size_t)raw, KVC_HUGE_2M);
    if (p > raw) munmap(raw, (size_t)(p - raw));
    const size_t tail = (size_t)(raw + len + KVC_HUGE_2M - (p + len));
    if (tail) munmap(p + len, tail);
    *marked = madvise(p, len, MADV_HUGEPAGE) == 0;
    return p;
}

/* Anonymous mapping of the right page size for b (hugetlb, else THP, else normal). */
static kvc_status_t map_private(kvc_mem_block_t *b, const kvc_placement_t *pl)
{
    b->page_size = base_page();
    b->pages_kind = KVC_MEM_PAGES_NORMAL;
    if (!(b->kind_requested & KVC_MEM_HUGEPAGE)) {
        b->mapped_size = round_up(b->size, b->page_size);
        b->ptr = map_anon(b->mapped_size, 0);
        if (!b->ptr) return kvc_error(KVC_ERR_NO_MEMORY, "mmap of %zu bytes failed: %s", b->mapped_size, strerror(errno));
        return KVC_OK;
    }
    b->mapped_size = round_up(b->size, KVC_HUGE_2M);
    char why[256];
    b->ptr = map_hugetlb(b, pl, why, sizeof(why));
    if (b->ptr) {
        b->page_size = KVC_HUGE_2M;
        b->pages_kind = KVC_MEM_PAGES_HUGETLB;
        return KVC_OK;
    }
    if (b->policy == KVC_MEM_POLICY_STRICT)
        return kvc_error(KVC_ERR_LIMIT, "strict hugepages impossible: %s; raise "
                                        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages or use the preferred "
                                        "policy", why);
    const kvc_thp_mode_t thp = kvc_thp_mode();
    int marked = 0;
    if (thp == KVC_THP_MADVISE || thp == KVC_THP_ALWAYS) b->ptr = map_thp(b->mapped_size, &marked);
    else b->ptr = map_anon(b->mapped_size, 0);
    if (!b->ptr) return kvc_error(KVC_ERR_NO_MEMORY, "mmap of %zu bytes failed: %s", b->mapped_size, strerror(errno));
    if (marked) {
        b->pages_kind = KVC_MEM_PAGES_THP;
        kvc_mem_fallback(b, KVC_MEM_FALLBACK_NO_HUGETLB, "hugetlb pages unavailable (%s): transparent hugepages used.",
                         why);
    } else {
        kvc_mem_fallback(b, KVC_MEM_FALLBACK_NO_HUGETLB | KVC_MEM_FALLBACK_NO_THP,
                         "hugetlb pages unavailable (%s) and transparent hugepages are %s: normal pages used.", why,
                         thp == KVC_THP_MADVISE || thp == KVC_THP_ALWAYS ? "refused (madvise failed)"
                                                                          : kvc_thp_mode_name(thp));
    }
    return KVC_OK;
}

static void unlink_block(const kvc_mem_block_t *b)
{
    if ((b->kind_obtained & KVC_MEM_SHARED) && !b->attached && b->creator_pid == getpid()) {
        if (shm_unlink(b->name) != 0) KVC_WARN("shm_unlink('%s') failed: %s", b->name, strerror(errno));
        kvc_shm_record_remove(b->name);
    }
    if (b->owner_fd >= 0) close(b->owner_fd); /* after the unlink: the name is never seen abandoned */
}

static void unmap_block(const kvc_mem_block_t *b)
{
    if (munmap(b->ptr, b->mapped_size) != 0)
        KVC_WARN("munmap(%p, %zu) failed: %s", b->ptr, b->mapped_size, strerror(errno));
    unlink_block(b);
}

/* Bytes of [p, p+len) backed by transparent huge pages, from the AnonHugePages line of the
 * /proc/self/smaps entry containing p (an upper bound when the kernel merged the mapping with a
 * neighbour, hence the cap at len). */
static size_t thp_bytes(const void *p, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    int inside = 0;
    size_t kb = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (inside) break;
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb * 1024 < len ? kb * 1024 : len;
}

/* ---------------------------------------------------------------- registry */

static void registry_add(kvc_context_t *ctx, kvc_mem_block_t *b)
{
    pthread_mutex_lock(&ctx->mem->lock);
    b->next = ctx->mem->head;
    ctx->mem->head = b;
    ctx->mem->count++;
    pthread_mutex_unlock(&ctx->mem->lock);
}

/* Unlink and return the block starting at ptr, or NULL. */
static kvc_mem_block_t *registry_take(kvc_context_t *ctx, const void *ptr)
{
    pthread_mutex_lock(&ctx->mem->lock);
    kvc_mem_block_t **pp = &ctx->mem->head;
    while (*pp && (*pp)->ptr != ptr) pp = &(*pp)->next;
    kvc_mem_block_t *b = *pp;
    if (b) {
        *pp = b->next;
        ctx->mem->count--;
    }
    pthread_mutex_unlock(&ctx->mem->lock);
    return b;
}

static void fill_report(kvc_context_t *ctx, const kvc_mem_block_t *b, kvc_mem_report_t *r)
{
    memset(r, 0, sizeof(*r));
    r->size = b->size;
    r->mapped_size = b->mapped_size;
    r->kind_requested = b->kind_requested;
    r->kind_obtained = b->kind_obtained;
    r->policy = b->policy;
    r->page_size = b->page_size;
    r->pages_kind = b->pages_kind;
    r->huge_bytes = b->pages_kind == KVC_MEM_PAGES_HUGETLB ? b->mapped_size
                    : b->pages_kind == KVC_MEM_PAGES_THP   ? thp_bytes(b->ptr, b->mapped_size)
                                                           : 0;
    r->pinned = b->pin_calls > 0;
    r->pin_calls = b->pin_calls;
    r->numa_requested = b->numa_requested;
    r->numa_bound = b->numa_bound;
    r->fallbacks = b->fallbacks;
    snprintf(r->fallback_text, sizeof(r->fallback_text), "%s", b->fallback_text);
    r->attached = b->attached;
    snprintf(r->name, sizeof(r->name), "%s", b->name);
    kvc_place_locate(ctx, b, r);
}

static void release(kvc_context_t *ctx, kvc_mem_block_t *b)
{
    unpin_block(ctx, b);
    unmap_block(b);
    free(b);
}

/* The last steps of every allocation and attached mapping: pin when kind asks (with reg), enter
 * the registry, fill the report. On failure the block is released. */
static kvc_status_t pin_and_register(kvc_context_t *ctx, kvc_mem_block_t *b, unsigned kind, register_fn reg,
                                     kvc_mem_report_t *report)
{
    if (kind & KVC_MEM_PINNED) {
        const kvc_status_t st = pin_block(ctx, b, reg);
        if (st != KVC_OK) {
            release(ctx, b);
            return st;
        }
        b->kind_obtained |= KVC_MEM_PINNED;
    }
    registry_add(ctx, b);
    if (report) fill_report(ctx, b, report);
    return KVC_OK;
}

/* ---------------------------------------------------------------- quarantine of freed ranges */

/* Reserved address space counts against RLIMIT_AS: quarantine only without that limit. */
static int quarantine_allowed(size_t len)
{
    struct rlimit rl;
    return len <= KVC_MEM_QUARANTINE_BYTES && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY;
}

/* Unmap a freed block, or replace its pages by a PROT_NONE reservation kept in the ring (the
 * replacement is one atomic mmap: no other mapping can take the address in between). */
static void retire_block(kvc_context_t *ctx, kvc_mem_block_t *b)
{
    kvc_mem_registry_t *r = ctx->mem;
    if (!quarantine_allowed(b->mapped_size) ||
        mmap(b->ptr, b->mapped_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != b->ptr) {
        unmap_block(b);
        free(b);
        return;
    }
    unlink_block(b);
    pthread_mutex_lock(&r->lock);
    while (r->qcount && (r->qcount == KVC_MEM_QUARANTINE_RANGES || r->qbytes + b->mapped_size > KVC_MEM_QUARANTINE_BYTES)) {
        munmap(r->quarantine[r->qfirst].ptr, r->quarantine[r->qfirst].len);
        r->qbytes -= r->quarantine[r->qfirst].len;
        r->qfirst = (r->qfirst + 1) % KVC_MEM_QUARANTINE_RANGES;
        r->qcount--;
    }
    const size_t at = (r->qfirst + r->qcount++) % KVC_MEM_QUARANTINE_RANGES;
    r->quarantine[at].ptr = b->ptr;
    r->quarantine[at].len = b->mapped_size;
    r->qbytes += b->mapped_size;
    pthread_mutex_unlock(&r->lock);
    free(b);
}

static int quarantined(kvc_context_t *ctx, const void *ptr)
{
    kvc_mem_registry_t *r = ctx->mem;
    int found = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->qcount && !found; i++) found = r->quarantine[(r->qfirst + i) % KVC_MEM_QUARANTINE_RANGES].ptr == ptr;
    pthread_mutex_unlock(&r->lock);
    return found;
}

/* ---------------------------------------------------------------- API */

KVC_API kvc_status_t kvc_mem_alloc(kvc_context_t *ctx, size_t size, const kvc_mem_params_t *params, void **out,
                                   kvc_mem_report_t *report)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and out must not be NULL");
    unsigned kind = 0;
    kvc_status_t st = check_params(params, size, &kind);
    if (st != KVC_OK) return st;
    const uint64_t mask = params ? params->field_mask : 0;

    kvc_mem_block_t *b = calloc(1, sizeof(*b));
    if (!b) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a registry entry");
    b->size = size;
    b->kind_requested = kind;
    b->policy = (mask & KVC_MEM_PARAM_POLICY) ? params->policy : KVC_MEM_POLICY_PREFERRED;
    b->pin_chunk = (mask & KVC_MEM_PARAM_PIN_CHUNK) ? params->pin_chunk : KVC_MEM_DEFAULT_PIN_CHUNK;
    b->numa_requested = b->numa_bound = -1;
    b->creator_pid = getpid();
    b->owner_fd = -1;
    const int touch = (mask & KVC_MEM_PARAM_TOUCH) ? params->touch != 0 : 1;

    kvc_placement_t pl = { NULL };
    if (kind & KVC_MEM_NUMA) {
        st = kvc_place_resolve(ctx, params, b, &pl);
        if (st != KVC_OK) goto fail_unmapped;
    }
    if (kind & KVC_MEM_SHARED) {
        snprintf(b->name, sizeof(b->name), "%s", params->name);
        b->page_size = base_page();
        b->pages_kind = KVC_MEM_PAGES_NORMAL;
        b->mapped_size = round_up(size, b->page_size);
        int fd;
        const int reclaim = (mask & KVC_MEM_PARAM_RECLAIM) && params->reclaim;
        st = kvc_shm_create_map(b->name, b->mapped_size, reclaim, &fd, &b->ptr);
        if (st != KVC_OK) goto fail_unmapped;
        /* Bind before reserving: the reserved pages follow the segment's policy. */
        st = kvc_place_bind(ctx, b, &pl, b->ptr, b->mapped_size);
        if (st == KVC_OK) st = kvc_shm_reserve(b->name, fd, size);
        if (st != KVC_OK) {
            kvc_shm_abort(b->name, fd, b->ptr, b->mapped_size);
            goto fail_unmapped;
        }
        b->owner_fd = fd;
        b->kind_obtained |= KVC_MEM_SHARED;
    } else {
        st = map_private(b, &pl);
        if (st != KVC_OK) goto fail_unmapped;
        st = kvc_place_bind(ctx, b, &pl, b->ptr, b->mapped_size);
        if (st != KVC_OK) goto fail;
    }
    if (b->numa_bound >= 0) b->kind_obtained |= KVC_MEM_NUMA;
    if (b->pages_kind != KVC_MEM_PAGES_NORMAL) b->kind_obtained |= KVC_MEM_HUGEPAGE;
    if (touch) {
        st = kvc_place_touch(ctx, b, &pl, b->pages_kind == KVC_MEM_PAGES_HUGETLB ? KVC_HUGE_2M : base_page());
        if (st != KVC_OK) goto fail;
    }
    if ((st = pin_and_register(ctx, b, kind, ctx->ops.host_register, report)) != KVC_OK) return st;
    *out = b->ptr;
    return KVC_OK;
fail:
    release(ctx, b);
    return st;
fail_unmapped:
    free(b);
    return st;
}

KVC_API kvc_status_t kvc_mem_free(kvc_context_t *ctx, void *ptr)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    if (!ptr) return KVC_OK;
    kvc_mem_block_t *b = registry_take(ctx, ptr);
    if (!b && quarantined(ctx, ptr)) return kvc_error(KVC_ERR_STATE, "%p was already freed (double free)", ptr);
    if (!b)
        return kvc_error(KVC_ERR_STATE, "%p is not a live kvcore allocation of this context (freed twice, never "
                                        "allocated, or not the start of an allocation)", ptr);
    unpin_block(ctx, b);
    retire_block(ctx, b);
    return KVC_OK;
}

KVC_API kvc_status_t kvc_mem_attach(kvc_context_t *ctx, const char *name, unsigned kind, void **out, size_t *size,
                                    kvc_mem_report_t *report)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and out must not be NULL");
    if (kind & ~(unsigned)(KVC_MEM_SHARED | KVC_MEM_PINNED))
        return kvc_error(KVC_ERR_INVALID_ARG, "attach kind 0x%x: only KVC_MEM_SHARED and KVC_MEM_PINNED apply", kind);
    kvc_status_t st = kvc_shm_check_name(name);
    if (st != KVC_OK) return st;
    kvc_mem_block_t *b = new_attached_block(name, kind | KVC_MEM_SHARED, KVC_MEM_SHARED);
    if (!b) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a registry entry");
    st = kvc_shm_attach_map(name, &b->ptr, &b->size, &b->mapped_size);
    if (st != KVC_OK) {
        free(b);
        return st;
    }
    if ((st = pin_and_register(ctx, b, kind, ctx->ops.host_register, report)) != KVC_OK) return st;
    if (size) *size = b->size;
    *out = b->ptr;
    return KVC_OK;
}

/* mmap of a device file: shared and writable, the bytes are the device's. */
static kvc_status_t map_device_file(const char *path, size_t size, size_t offset, void **addr)
{
    const int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO must not block */
    if (fd < 0) {
        const int err = errno;
        struct stat ps;
        /* A unix socket cannot be opened at all (ENXIO): it is the wrong kind of file, as a FIFO is. */
        if (err == ENXIO && stat(path, &ps) == 0 && S_ISSOCK(ps.st_mode))
            return kvc_error(KVC_ERR_INVALID_ARG, "%s is a socket, not a regular or sysfs resource file", path);
        return kvc_error(err == EISDIR ? KVC_ERR_INVALID_ARG : kvc_status_from_errno(err), "cannot open %s: %s", path,
                         err == EISDIR ? "it is a directory" : strerror(err));
    }
    struct stat sb;
    kvc_status_t st = KVC_OK;
    if (fstat(fd, &sb) != 0) {
        st = kvc_error(kvc_status_from_errno(errno), "cannot stat %s: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = kvc_error(KVC_ERR_INVALID_ARG, "%s is not a regular or sysfs resource file (a directory, FIFO, socket "
                                            "or device node)", path);
    } else if ((uint64_t)sb.st_size < (uint64_t)offset || (uint64_t)sb.st_size - (uint64_t)offset < (uint64_t)size) {
        st = kvc_error(KVC_ERR_OUT_OF_RANGE, "%zu bytes at offset %zu reach past the end of %s (%lld bytes)", size,
                       offset, path, (long long)sb.st_size);
    } else {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
        if (p == MAP_FAILED)
            st = kvc_error(errno == EACCES || errno == EPERM ? KVC_ERR_PERMISSION : KVC_ERR_NO_MEMORY,
                           "mmap of %zu bytes at offset %zu of %s failed: %s", size, offset, path, strerror(errno));
        else
            *addr = p;
    }
    close(fd); /* the mapping keeps the file */
    return st;
}

KVC_API kvc_status_t kvc_mem_map_file(kvc_context_t *ctx, const char *path, size_t size, size_t offset, unsigned kind,
                                      void **out, kvc_mem_report_t *report)
{
    if (!ctx || !path || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx, path and out must not be NULL");
    if (size == 0) return kvc_error(KVC_ERR_INVALID_ARG, "map_file: size must be at least 1 byte");
    if (kind & ~(unsigned)KVC_MEM_PINNED)
        return kvc_error(KVC_ERR_INVALID_ARG, "map_file kind 0x%x: only KVC_MEM_PINNED applies", kind);
    if (offset % base_page())
        return kvc_error(KVC_ERR_INVALID_ARG, "map_file: offset %zu is not a multiple of the page size (%zu)", offset,
                         base_page());
    if ((kind & KVC_MEM_PINNED) && !ctx->ops.host_register_io)
        return kvc_error(KVC_ERR_UNSUPPORTED, "map_file: backend %s cannot register I/O memory (module built before "
                                              "kvcore had host_register_io)", ctx->backend->name);
    kvc_mem_block_t *b = new_attached_block(path, kind, KVC_MEM_DEVICE_FILE);
    if (!b) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a registry entry");
    b->size = size;
    b->mapped_size = round_up(size, b->page_size);
    kvc_status_t st = map_device_file(path, size, offset, &b->ptr);
    if (st != KVC_OK) {
        free(b);
        return st;
    }
    b->pin_chunk = b->mapped_size; /* pinned: one registration, as LMCache's */
    if ((st = pin_and_register(ctx, b, kind, ctx->ops.host_register_io, report)) != KVC_OK) return st;
    *out = b->ptr;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_mem_query(kvc_context_t *ctx, const void *ptr, kvc_mem_report_t *out)
{
    if (!ctx || !ptr || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx, ptr and out must not be NULL");
    kvc_mem_block_t copy;
    int found = 0;
    pthread_mutex_lock(&ctx->mem->lock);
    for (const kvc_mem_block_t *b = ctx->mem->head; b; b = b->next)
        if (b->ptr == ptr) {
            copy = *b;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&ctx->mem->lock);
    if (!found) return kvc_error(KVC_ERR_STATE, "%p is not a live kvcore allocation of this context", ptr);
    fill_report(ctx, &copy, out);
    return KVC_OK;
}

KVC_API size_t kvc_mem_live_count(kvc_context_t *ctx)
{
    if (!ctx) return 0;
    pthread_mutex_lock(&ctx->mem->lock);
    const size_t n = ctx->mem->count;
    pthread_mutex_unlock(&ctx->mem->lock);
    return n;
}

static void block_info(const kvc_mem_block_t *b, kvc_mem_info_t *out)
{
    out->ptr = b->ptr;
    out->size = b->size;
    out->kind = b->kind_obtained;
    out->numa_node = b->numa_bound;
    out->pinned = b->pin_calls > 0;
    out->attached = b->attached;
    snprintf(out->name, sizeof(out->name), "%s", b->name);
}

KVC_API kvc_status_t kvc_mem_live_get(kvc_context_t *ctx, size_t index, kvc_mem_info_t *out)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and out must not be NULL");
    pthread_mutex_lock(&ctx->mem->lock);
    const kvc_mem_block_t *b = ctx->mem->head;
    for (size_t i = 0; b && i < index; i++) b = b->next;
    if (b) block_info(b, out);
    const size_t n = ctx->mem->count;
    pthread_mutex_unlock(&ctx->mem->lock);
    if (!b) return kvc_error(KVC_ERR_OUT_OF_RANGE, "allocation index %zu outside [0, %zu)", index, n);
    return KVC_OK;
}

void kvc_hostmem_teardown(kvc_context_t *ctx)
{
    kvc_mem_registry_t *r = ctx->mem;
    if (!r) return;
    for (kvc_mem_block_t *b = r->head, *next; b; b = next) {
        next = b->next;
        char kind[64];
        KVC_WARN("leak: %zu bytes (%s) at %p, NUMA node %d%s%s%s still allocated at context destroy: freeing it",
                 b->size, kvc_mem_kind_name(b->kind_obtained, kind, sizeof(kind)), b->ptr, b->numa_bound,
                 b->name[0] ? ", shared memory '" : "", b->name, b->name[0] ? "'" : "");
        release(ctx, b);
    }
    for (size_t i = 0; i < r->qcount; i++) {
        const size_t at = (r->qfirst + i) % KVC_MEM_QUARANTINE_RANGES;
        munmap(r->quarantine[at].ptr, r->quarantine[at].len);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
    ctx->mem = NULL;
}
