/* Topology queries (hwloc, loaded once per context): GPUs on the PCI bus and NUMA nodes. */
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

#ifdef __cplusplus
}
#endif
#endif
