/* SPDX-License-Identifier: BSD-3-Clause */
/* NUMA placement through hwloc: which node, binding, parallel first touch from threads bound to
 * the node, and where the pages ended up (hwloc_get_area_memlocation). Node sets are hwloc bitmaps
 * throughout, so node OS indexes past 63 work. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef KVC_HAVE_OPENMP
#include <omp.h>
#endif

#include "hostmem.h"
#include "sysinfo.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack it, older kernels say EINVAL */
#endif

void kvc_mem_fallback(kvc_mem_block_t *b, uint32_t flag, const char *fmt, ...)
{
    b->fallbacks |= flag;
    size_t used = strlen(b->fallback_text);
    if (used && used + 1 < sizeof(b->fallback_text)) b->fallback_text[used++] = ' ';
    if (used + 1 >= sizeof(b->fallback_text)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->fallback_text + used, sizeof(b->fallback_text) - used, fmt, ap);
    va_end(ap);
    KVC_WARN("memory fallback: %s", b->fallback_text + used);
}

static void nodes_list(hwloc_topology_t topo, char *buf, size_t len)
{
    hwloc_bitmap_list_snprintf(buf, len, hwloc_topology_get_topology_nodeset(topo));
}

/* Nothing to bind to: strict fails with the reason, preferred records it. */
static kvc_status_t unplaceable(kvc_mem_block_t *b, uint32_t flag, const char *why)
{
    if (b->policy == KVC_MEM_POLICY_STRICT)
        return kvc_error(KVC_ERR_PLACEMENT, "strict NUMA placement impossible: %s", why);
    kvc_mem_fallback(b, flag, "%s: memory not bound.", why);
    return KVC_OK;
}

kvc_status_t kvc_place_resolve(kvc_context_t *ctx, const kvc_mem_params_t *p, kvc_mem_block_t *b, kvc_placement_t *pl)
{
    pl->node = NULL;
    const kvc_mem_target_t target = (p && (p->field_mask & KVC_MEM_PARAM_TARGET)) ? p->target : KVC_MEM_TARGET_LOCAL;
    char why[384], nodes[128];
    nodes_list(ctx->topo, nodes, sizeof(nodes));
    hwloc_obj_t node = NULL;
    if (target == KVC_MEM_TARGET_NODE) {
        b->numa_requested = p->node <= INT_MAX ? (int)p->node : -1;
        node = hwloc_get_numanode_obj_by_os_index(ctx->topo, p->node);
        if (!node) {
            snprintf(why, sizeof(why), "NUMA node %u does not exist (the topology has nodes %s)", p->node, nodes);
            return unplaceable(b, KVC_MEM_FALLBACK_NO_SUCH_NODE, why);
        }
    } else if (target == KVC_MEM_TARGET_PCI) {
        int os = -1;
        kvc_status_t st = kvc_topology_numa_of_pci(ctx, p->pci_bus_id, &os);
        if (st == KVC_ERR_INVALID_ARG) return st;
        if (st != KVC_OK) {
            snprintf(why, sizeof(why), "%s", kvc_last_error());
            return unplaceable(b, KVC_MEM_FALLBACK_NO_SUCH_NODE, why);
        }
        b->numa_requested = os;
        node = hwloc_get_numanode_obj_by_os_index(ctx->topo, (unsigned)os);
        if (!node) {
            snprintf(why, sizeof(why), "PCI device %s is near NUMA node %d, which hwloc does not list", p->pci_bus_id,
                     os);
            return unplaceable(b, KVC_MEM_FALLBACK_NO_SUCH_NODE, why);
        }
    } else if (!ctx->topo_synthetic) {
        /* Local: the node of the CPU this thread runs on now. */
        hwloc_bitmap_t cpu = hwloc_bitmap_alloc(), ns = hwloc_bitmap_alloc();
        if (cpu && ns && hwloc_get_last_cpu_location(ctx->topo, cpu, HWLOC_CPUBIND_THREAD) == 0) {
            hwloc_cpuset_to_nodeset(ctx->topo, cpu, ns);
            const int first = hwloc_bitmap_first(ns);
            if (first >= 0) node = hwloc_get_numanode_obj_by_os_index(ctx->topo, (unsigned)first);
        }
        hwloc_bitmap_free(cpu);
        hwloc_bitmap_free(ns);
        if (!node) return unplaceable(b, KVC_MEM_FALLBACK_NO_SUCH_NODE, "the calling thread's NUMA node is unknown");
        b->numa_requested = (int)node->os_index;
    }
    if (ctx->topo_synthetic)
        return unplaceable(b, KVC_MEM_FALLBACK_NOT_THIS_SYSTEM,
                           "the topology was loaded from XML (HWLOC_XMLFILE), so binding would not be real");
    /* MPOL_BIND cannot spill to other nodes: more than the node holds would end in the OOM killer. */
    const uint64_t node_bytes = node->attr ? node->attr->numanode.local_memory : 0;
    if (b->policy == KVC_MEM_POLICY_STRICT && node_bytes && b->size > node_bytes)
        return kvc_error(KVC_ERR_PLACEMENT, "strict NUMA placement impossible: %zu bytes requested, NUMA node %u has "
                         "%" PRIu64 " bytes in all", b->size, node->os_index, node_bytes);
    pl->node = node;
    return KVC_OK;
}

kvc_status_t kvc_place_bind(kvc_context_t *ctx, kvc_mem_block_t *b, kvc_placement_t *pl, void *addr, size_t len)
{
    if (!pl->node) return KVC_OK;
    const int strict = b->policy == KVC_MEM_POLICY_STRICT;
    /* hwloc maps BIND to MPOL_BIND with STRICT and to MPOL_PREFERRED (MPOL_PREFERRED_MANY on Linux
     * 5.15+) without; tests/numa checks which one the kernel reports. */
    const int flags = HWLOC_MEMBIND_BYNODESET | (strict ? HWLOC_MEMBIND_STRICT : 0);
    if (hwloc_set_area_membind(ctx->topo, addr, len, pl->node->nodeset, HWLOC_MEMBIND_BIND, flags) == 0) {
        b->numa_bound = (int)pl->node->os_index;
        return KVC_OK;
    }
    const int err = errno;
    char why[384];
    snprintf(why, sizeof(why), "binding %zu bytes to NUMA node %u was refused by the OS (%s%s)", len,
             pl->node->os_index, strerror(err),
             err == EPERM ? "; containers need CAP_SYS_NICE to bind memory" : "");
    pl->node = NULL;
    if (strict) return kvc_error(KVC_ERR_PLACEMENT, "strict NUMA placement impossible: %s", why);
    kvc_mem_fallback(b, KVC_MEM_FALLBACK_BIND_REFUSED, "%s: memory not bound.", why);
    return KVC_OK;
}

/* Fault in [p, p+len): MADV_POPULATE_WRITE (Linux 5.14) populates a whole range in one call, far
 * cheaper than one trap per page; older kernels get one write per page. 0 or an errno. */
static int populate(char *p, size_t len, size_t step)
{
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return 0;
    if (errno != EINVAL) return errno;
    for (size_t off = 0; off < len; off += step) ((volatile char *)p)[off] = 0;
    return 0;
}

kvc_status_t kvc_place_touch(kvc_context_t *ctx, kvc_mem_block_t *b, const kvc_placement_t *pl, size_t step)
{
    const size_t npages = b->mapped_size / step;
    hwloc_const_cpuset_t cpus = pl->node && !hwloc_bitmap_iszero(pl->node->cpuset) ? pl->node->cpuset : NULL;
    int nt = ctx->num_threads;
    if (cpus && hwloc_bitmap_weight(cpus) < nt) nt = hwloc_bitmap_weight(cpus);
    if ((size_t)nt > npages / 64) nt = npages / 64 > 0 ? (int)(npages / 64) : 1; /* not worth threads */
    int unbound = 0, failed = 0;
#ifdef KVC_HAVE_OPENMP
#pragma omp parallel num_threads(nt) reduction(| : unbound) reduction(max : failed)
#endif
    {
#ifdef KVC_HAVE_OPENMP
        const size_t t = (size_t)omp_get_thread_num(), n = (size_t)omp_get_num_threads();
#else
        const size_t t = 0, n = 1;
#endif
        hwloc_bitmap_t saved = NULL;
        if (cpus) {
            saved = hwloc_bitmap_alloc();
            if (!saved || hwloc_get_cpubind(ctx->topo, saved, HWLOC_CPUBIND_THREAD) != 0 ||
                hwloc_set_cpubind(ctx->topo, cpus, HWLOC_CPUBIND_THREAD) != 0) {
                unbound = 1;
                hwloc_bitmap_free(saved);
                saved = NULL;
            }
        }
        const size_t lo = npages * t / n, hi = npages * (t + 1) / n;
        if (hi > lo) failed = populate((char *)b->ptr + lo * step, (hi - lo) * step, step);
        if (saved) {
            hwloc_set_cpubind(ctx->topo, saved, HWLOC_CPUBIND_THREAD);
            hwloc_bitmap_free(saved);
        }
    }
    if (failed)
        return kvc_error(failed == ENOMEM || failed == EFAULT ? KVC_ERR_NO_MEMORY : kvc_status_from_errno(failed),
                         "faulting in %zu bytes failed: %s", b->mapped_size, strerror(failed));
    if (unbound)
        kvc_mem_fallback(b, KVC_MEM_FALLBACK_TOUCH_UNBOUND,
                         "first-touch threads could not be bound to the CPUs of NUMA node %u; the memory binding "
                         "still places the pages.", pl->node->os_index);
    return KVC_OK;
}

typedef struct {
    unsigned os;
    uint64_t pages;
} node_count_t;

static int by_os_index(const void *a, const void *b)
{
    const unsigned x = ((const node_count_t *)a)->os, y = ((const node_count_t *)b)->os;
    return (x > y) - (x < y);
}

void kvc_place_locate(kvc_context_t *ctx, const kvc_mem_block_t *b, kvc_mem_report_t *r)
{
    const size_t base = (size_t)sysconf(_SC_PAGESIZE);
    r->pages_total = b->mapped_size / base;
    r->pages_sampled = r->pages_unplaced = 0;
    r->location_count = 0;
    r->location_known = 0;
    if (ctx->topo_synthetic) return; /* hwloc would describe the XML machine, not this one */
    const uint64_t samples = r->pages_total < KVC_MEM_LOCATION_SAMPLES ? r->pages_total : KVC_MEM_LOCATION_SAMPLES;
    const int cap = hwloc_get_nbobjs_by_type(ctx->topo, HWLOC_OBJ_NUMANODE) + 1;
    node_count_t *counts = calloc((size_t)cap, sizeof(*counts));
    hwloc_nodeset_t set = hwloc_bitmap_alloc();
    int used = 0, ok = counts && set;
    for (uint64_t s = 0; ok && s < samples; s++) {
        const char *page = (const char *)b->ptr + (size_t)(s * r->pages_total / samples) * base;
        if (hwloc_get_area_memlocation(ctx->topo, page, 1, set, HWLOC_MEMBIND_BYNODESET) != 0) {
            ok = 0;
            break;
        }
        r->pages_sampled++;
        if (hwloc_bitmap_iszero(set)) {
            r->pages_unplaced++;
            continue;
        }
        for (int os = hwloc_bitmap_first(set); os >= 0; os = hwloc_bitmap_next(set, os)) {
            int k = 0;
            while (k < used && counts[k].os != (unsigned)os) k++;
            if (k == used) {
                if (used == cap) continue; /* a node hwloc did not list: cannot happen, but never overflow */
                counts[used++] = (node_count_t){ (unsigned)os, 0 };
            }
            counts[k].pages++;
        }
    }
    if (ok) {
        qsort(counts, (size_t)used, sizeof(*counts), by_os_index);
        r->location_known = 1;
        r->location_count = (unsigned)used;
        for (int k = 0; k < used && k < KVC_MEM_REPORT_NODES; k++)
            r->location[k] = (kvc_mem_node_pages_t){ counts[k].os, counts[k].pages };
    } else {
        r->pages_sampled = r->pages_unplaced = 0;
    }
    hwloc_bitmap_free(set);
    free(counts);
}
