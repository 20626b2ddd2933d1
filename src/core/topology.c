/* SPDX-License-Identifier: BSD-3-Clause */
/* Topology: hwloc with PCI devices, to find GPUs and NUMA nodes; one copy per context. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "sysinfo.h"

static int pci_node_of(hwloc_topology_t topo, hwloc_obj_t pcidev)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pcidev);
    if (!anc || !anc->nodeset || hwloc_bitmap_iszero(anc->nodeset)) return -1;
    /* A PCI device attached to a package with several nodes is "near" all of them; take the first. */
    return hwloc_bitmap_first(anc->nodeset);
}

/* Discover a topology with PCI devices into *topo. */
static kvc_status_t discover(hwloc_topology_t *topo)
{
    if (hwloc_topology_init(topo) < 0) return kvc_error(KVC_ERR_NO_MEMORY, "hwloc_topology_init failed");
    hwloc_topology_set_io_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#if defined(__linux__) && HWLOC_API_VERSION >= 0x00020100 /* hwloc_topology_set_components: 2.1 */
    /* kvcore needs each PCI device's bus id, class and locality, which hwloc's "linux" component
     * reads from sysfs. The other I/O components only add names or GPU OS devices, and cost far
     * more than the whole discovery: "pci" (libpciaccess) parses pci.ids with a realloc per line
     * (40 s under ASan or valgrind) and leaks about 600 KB per load; "opencl", "cuda", "nvml",
     * "rsmi" and "levelzero" start a GPU runtime inside the caller's process; "gl" talks to X
     * servers. A user's HWLOC_COMPONENTS decides instead (hwloc reads it at load). Names this
     * hwloc does not have are refused with -1, which is fine. */
    if (!getenv("HWLOC_COMPONENTS")) {
        static const char *const skip[] = { "pci", "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl" };
        for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
            (void)hwloc_topology_set_components(*topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
    }
#endif
    if (hwloc_topology_load(*topo) < 0) {
        hwloc_topology_destroy(*topo);
        *topo = NULL;
        return kvc_error(KVC_ERR_BACKEND, "hwloc_topology_load failed: %m (check HWLOC_XMLFILE)");
    }
    return KVC_OK;
}

/* The live machine is discovered once per process and each context gets a copy
 * (hwloc_topology_dup): discovery with the PCI bus reads sysfs for every device, and hwloc's pci
 * component (used where the one above is not skipped: other OSes, a user's HWLOC_COMPONENTS) leaks
 * about 600 KB on every discovery. The shared copy lives until the process exits. A topology
 * from the environment (HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_FSROOT, HWLOC_COMPONENTS) is loaded
 * afresh every time, so it can change between contexts. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t live_topo;

static int live_machine(void)
{
    static const char *const vars[] = { "HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_COMPONENTS" };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 0;
    }
    return 1;
}

static kvc_status_t topology_for_context(hwloc_topology_t *topo)
{
    if (!live_machine()) return discover(topo);
    kvc_status_t st = KVC_OK;
    pthread_mutex_lock(&live_lock);
    if (!live_topo) st = discover(&live_topo);
    if (st == KVC_OK && hwloc_topology_dup(topo, live_topo) < 0)
        st = kvc_error(KVC_ERR_NO_MEMORY, "hwloc_topology_dup failed: %m");
    pthread_mutex_unlock(&live_lock);
    return st;
}

kvc_status_t kvc_topology_load(kvc_context_t *ctx)
{
    ctx->topo = NULL;
    const kvc_status_t st = topology_for_context(&ctx->topo);
    if (st != KVC_OK) return st;
    const char *src = hwloc_obj_get_info_by_name(hwloc_get_root_obj(ctx->topo), "Backend");
    ctx->topo_synthetic = !hwloc_topology_is_thissystem(ctx->topo) || (src && !strcmp(src, "XML"));

    ctx->num_gpus = 0;
    for (hwloc_obj_t d = hwloc_get_next_pcidev(ctx->topo, NULL); d; d = hwloc_get_next_pcidev(ctx->topo, d)) {
        const unsigned cls = d->attr->pcidev.class_id;
        if ((cls >> 8) != 0x03) continue; /* display controllers only */
        if (ctx->num_gpus == KVC_MAX_GPUS) break;
        kvc_pci_device_t *g = &ctx->gpus[ctx->num_gpus++];
        snprintf(g->bus_id, sizeof(g->bus_id), "%04x:%02x:%02x.%01x", d->attr->pcidev.domain, d->attr->pcidev.bus,
                 d->attr->pcidev.dev, d->attr->pcidev.func);
        g->vendor_id = d->attr->pcidev.vendor_id;
        g->device_id = d->attr->pcidev.device_id;
        g->class_id = (uint16_t)cls;
        g->numa_node = pci_node_of(ctx->topo, d);
    }
    return KVC_OK;
}

void kvc_topology_unload(kvc_context_t *ctx)
{
    if (ctx->topo) hwloc_topology_destroy(ctx->topo);
    ctx->topo = NULL;
}

int kvc_topology_has_vendor(const kvc_context_t *ctx, uint16_t vendor_id, char *first_bus_id, size_t len)
{
    int n = 0;
    for (int i = 0; i < ctx->num_gpus; i++)
        if (ctx->gpus[i].vendor_id == vendor_id) {
            if (n == 0 && first_bus_id) snprintf(first_bus_id, len, "%s", ctx->gpus[i].bus_id);
            n++;
        }
    return n;
}

KVC_API int kvc_topology_gpu_count(const kvc_context_t *ctx) { return ctx ? ctx->num_gpus : 0; }

KVC_API kvc_status_t kvc_topology_gpu(const kvc_context_t *ctx, int index, kvc_pci_device_t *out)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and out must not be NULL");
    if (index < 0 || index >= ctx->num_gpus)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "gpu index %d outside [0, %d)", index, ctx->num_gpus);
    *out = ctx->gpus[index];
    return KVC_OK;
}

KVC_API int kvc_topology_numa_count(const kvc_context_t *ctx)
{
    return ctx ? hwloc_get_nbobjs_by_type(ctx->topo, HWLOC_OBJ_NUMANODE) : 0;
}

KVC_API kvc_status_t kvc_topology_numa_node(const kvc_context_t *ctx, int index, kvc_numa_node_info_t *out)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and out must not be NULL");
    hwloc_obj_t n = hwloc_get_obj_by_type(ctx->topo, HWLOC_OBJ_NUMANODE, (unsigned)index);
    if (index < 0 || !n)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "numa index %d outside [0, %d)", index, kvc_topology_numa_count(ctx));
    out->os_index = n->os_index;
    out->total_bytes = n->attr ? n->attr->numanode.local_memory : 0;
    out->num_cpus = n->cpuset ? hwloc_bitmap_weight(n->cpuset) : 0;
    /* hwloc knows each node's size, not its free memory: that comes from sysfs, for real topologies. */
    out->free_bytes = ctx->topo_synthetic ? -1 : kvc_sys_node_free_bytes(n->os_index);
    return KVC_OK;
}

KVC_API kvc_status_t kvc_topology_numa_of_pci(const kvc_context_t *ctx, const char *bus_id, int *node)
{
    if (!ctx || !bus_id || !node) return kvc_error(KVC_ERR_INVALID_ARG, "ctx, bus_id and node must not be NULL");
    unsigned dom = 0, bus, dev, fn;
    char tail;
    if (sscanf(bus_id, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
        dom = 0;
        if (sscanf(bus_id, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
            return kvc_error(KVC_ERR_INVALID_ARG, "malformed PCI bus id '%s' (want DDDD:BB:DD.F)", bus_id);
    }
    if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
        return kvc_error(KVC_ERR_INVALID_ARG, "PCI bus id '%s' has a field out of range", bus_id);
    hwloc_obj_t d = hwloc_get_pcidev_by_busid(ctx->topo, dom, bus, dev, fn);
    if (!d) return kvc_error(KVC_ERR_NOT_FOUND, "hwloc does not know PCI device %s", bus_id);
    int n = pci_node_of(ctx->topo, d);
    if (n < 0) return kvc_error(KVC_ERR_NOT_FOUND, "PCI device %s has no NUMA locality in the topology", bus_id);
    *node = n;
    return KVC_OK;
}

KVC_API int kvc_topology_is_synthetic(const kvc_context_t *ctx) { return ctx ? ctx->topo_synthetic : 0; }

KVC_API int kvc_hugepage_pools(kvc_hugepage_pool_t *out, int max)
{
    return kvc_sys_hugepage_pools_at(KVC_SYS_HUGEPAGES_DIR, out, max);
}

KVC_API kvc_thp_mode_t kvc_thp_mode(void) { return kvc_sys_thp_mode_at(KVC_SYS_THP_ENABLED); }

KVC_API kvc_status_t kvc_llc_info(kvc_llc_info_t *out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "out must not be NULL");
    long cpuid = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    cpuid = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
    if (cpuid <= 0) cpuid = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    kvc_sys_llc_resolve(kvc_sys_llc_bytes_at(KVC_SYS_CPU0_CACHE_DIR), cpuid, out);
    return KVC_OK;
}

KVC_API const char *kvc_llc_source_name(kvc_llc_source_t source)
{
    switch (source) {
    case KVC_LLC_SYSFS: return "sysfs";
    case KVC_LLC_CPUID: return "cpuid";
    case KVC_LLC_CPUID_CAPPED: return "cpuid, capped";
    default: return "unknown";
    }
}

KVC_API const char *kvc_thp_mode_name(kvc_thp_mode_t mode)
{
    switch (mode) {
    case KVC_THP_NEVER: return "never";
    case KVC_THP_MADVISE: return "madvise";
    case KVC_THP_ALWAYS: return "always";
    default: return "unavailable";
    }
}

KVC_API kvc_status_t kvc_cgroup_info(kvc_cgroup_info_t *out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "out must not be NULL");
    kvc_sys_cgroup_at(KVC_SYS_CGROUP_ROOT, KVC_SYS_SELF_CGROUP, out);
    return KVC_OK;
}
