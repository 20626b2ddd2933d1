/* SPDX-License-Identifier: BSD-3-Clause */
/* Topology queries (hwloc, loaded once per context): GPUs on the PCI bus and NUMA nodes.
 * Thread safety: a context's topology is read-only after creation, so every query may run
 * concurrently (context.h); the kernel-setting queries take no context and only read procfs/sysfs. */
#ifndef KVCORE_TOPOLOGY_H
#define KVCORE_TOPOLOGY_H

#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A GPU-class PCI device (PCI class 0x03xx: VGA, 3D or display controller) seen by hwloc. */
typedef struct kvc_pci_device {
    char bus_id[16];      /* "DDDD:BB:DD.F", lower-case hex */
    uint16_t vendor_id;   /* 0x10de NVIDIA, 0x1002 AMD */
    uint16_t device_id;
    uint16_t class_id;
    int numa_node;        /* OS index of the nearest NUMA node, -1 when unknown */
} kvc_pci_device_t;

typedef struct kvc_numa_node_info {
    unsigned os_index;    /* the kernel's node number (may differ from the logical index) */
    uint64_t total_bytes; /* memory local to the node */
    int num_cpus;         /* processing units in the node's cpuset */
    int64_t free_bytes;   /* MemFree of the node from sysfs now; -1 when unknown (XML topology) */
} kvc_numa_node_info_t;

KVC_API int kvc_topology_gpu_count(const kvc_context_t *ctx);
KVC_API kvc_status_t kvc_topology_gpu(const kvc_context_t *ctx, int index, kvc_pci_device_t *out);

KVC_API int kvc_topology_numa_count(const kvc_context_t *ctx);
KVC_API kvc_status_t kvc_topology_numa_node(const kvc_context_t *ctx, int index, kvc_numa_node_info_t *out);

/* OS index of the NUMA node nearest the PCI device "DDDD:BB:DD.F" (or "BB:DD.F", domain 0).
 * Derived from the PCI tree, never from a device ordinal. KVC_ERR_NOT_FOUND if hwloc does not
 * know the device, KVC_ERR_INVALID_ARG for a malformed id. */
KVC_API kvc_status_t kvc_topology_numa_of_pci(const kvc_context_t *ctx, const char *bus_id, int *node);

/* True when the topology was loaded from an XML file (binding then does nothing real). */
KVC_API int kvc_topology_is_synthetic(const kvc_context_t *ctx);

/* ---- the running kernel's memory settings (always the real machine, even with an XML topology) ---- */

/* One hugetlb pool (/sys/kernel/mm/hugepages/hugepages-<size>kB). Counts are pages. */
typedef struct kvc_hugepage_pool {
    uint64_t page_size; /* bytes */
    uint64_t total;     /* nr_hugepages */
    uint64_t free;      /* free_hugepages (includes reserved ones) */
    uint64_t reserved;  /* resv_hugepages: promised to mappings, not yet faulted */
    uint64_t surplus;   /* surplus_hugepages */
} kvc_hugepage_pool_t;

/* Hugetlb pools by increasing page size; writes at most max entries and returns how many pools
 * exist (0 when the kernel has none). */
KVC_API int kvc_hugepage_pools(kvc_hugepage_pool_t *out, int max);

/* Transparent hugepage mode (/sys/kernel/mm/transparent_hugepage/enabled). */
typedef enum kvc_thp_mode {
    KVC_THP_UNAVAILABLE = 0, /* kernel without THP */
    KVC_THP_NEVER = 1,
    KVC_THP_MADVISE = 2,     /* only for ranges marked MADV_HUGEPAGE (what kvcore does) */
    KVC_THP_ALWAYS = 3,
} kvc_thp_mode_t;

KVC_API kvc_thp_mode_t kvc_thp_mode(void);
KVC_API const char *kvc_thp_mode_name(kvc_thp_mode_t mode); /* "unavailable", "never", ... */

/* The last-level cache size kvcore uses and where it came from. CPU transfers moving more than
 * 3/4 of it (at least 4 MiB; KVCORE_STREAM_MIN_BYTES overrides) write with streaming stores:
 * kvc_context_stream_min_bytes() gives a context's threshold. */
typedef enum kvc_llc_source {
    KVC_LLC_UNKNOWN = 0,       /* neither sysfs nor CPUID says: `bytes` is 0 (threshold: the 4 MiB floor) */
    KVC_LLC_SYSFS = 1,         /* /sys/devices/system/cpu/cpu0/cache (what lscpu shows) */
    KVC_LLC_CPUID = 2,         /* no sysfs cache information; CPUID's size (sysconf) */
    KVC_LLC_CPUID_CAPPED = 3,  /* no sysfs cache information; CPUID's size above the cap, capped */
} kvc_llc_source_t;

#define KVC_LLC_CPUID_CAP ((int64_t)32 << 20) /* largest CPUID-only size believed (docs/TRANSFER.md) */

typedef struct kvc_llc_info {
    int64_t bytes;          /* the size kvcore uses */
    int64_t sysfs_bytes;    /* what sysfs says, 0 when it says nothing */
    int64_t cpuid_bytes;    /* what CPUID (sysconf) says, 0 when it says nothing */
    kvc_llc_source_t source;
} kvc_llc_info_t;

KVC_API kvc_status_t kvc_llc_info(kvc_llc_info_t *out); /* KVC_ERR_INVALID_ARG when out is NULL */
KVC_API const char *kvc_llc_source_name(kvc_llc_source_t source); /* "sysfs", "cpuid", ... */

/* The calling process's cgroup limits (v2, or v1 memory and cpuset controllers). */
typedef struct kvc_cgroup_info {
    int version;             /* 2, 1, or 0 when no cgroup information was found */
    char memory_path[512];   /* cgroup directory the memory figures come from, "" when none */
    int64_t memory_limit;    /* bytes: the smallest limit on the path to the root; -1 unlimited */
    int64_t memory_usage;    /* bytes charged to the cgroup now; -1 unknown */
    char cpuset_cpus[256];   /* effective CPU list ("0-3,8"), "" unknown */
    char cpuset_mems[256];   /* effective memory node list, "" unknown */
} kvc_cgroup_info_t;

/* Reads /proc/self/cgroup and /sys/fs/cgroup. KVC_OK with version 0 when there is nothing to read. */
KVC_API kvc_status_t kvc_cgroup_info(kvc_cgroup_info_t *out);

#ifdef __cplusplus
}
#endif
#endif
