/* SPDX-License-Identifier: BSD-3-Clause */
/* The kernel's memory settings read from sysfs/procfs: hugetlb pools, THP mode, cgroup limits,
 * per-node free memory. The *_at variants take the roots so tests can point them at fake trees;
 * this file depends on libc only (tests compile it in). */
#ifndef KVC_CORE_SYSINFO_H
#define KVC_CORE_SYSINFO_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/topology.h>

#define KVC_SYS_HUGEPAGES_DIR "/sys/kernel/mm/hugepages"
#define KVC_SYS_THP_ENABLED "/sys/kernel/mm/transparent_hugepage/enabled"
#define KVC_SYS_CGROUP_ROOT "/sys/fs/cgroup"
#define KVC_SYS_SELF_CGROUP "/proc/self/cgroup"
#define KVC_SYS_NODE_DIR "/sys/devices/system/node"
#define KVC_SYS_CPU0_CACHE_DIR "/sys/devices/system/cpu/cpu0/cache"

int kvc_sys_hugepage_pools_at(const char *dir, kvc_hugepage_pool_t *out, int max);
kvc_thp_mode_t kvc_sys_thp_mode_at(const char *enabled_file);
/* Returns 0, or -1 when out is NULL. */
int kvc_sys_cgroup_at(const char *cgroup_root, const char *self_cgroup_file, kvc_cgroup_info_t *out);

/* CPUs the cgroup CPU controller allows (quota / period, the smallest on the path to the root), or
 * -1 when there is no quota. */
double kvc_sys_cpu_quota_at(const char *cgroup_root, const char *self_cgroup_file);

/* Bytes of the highest-level data or unified cache that cpu0's sysfs cache directory (dir)
 * describes, 0 when it describes none (some VMs expose no cache directory). */
int64_t kvc_sys_llc_bytes_at(const char *dir);

/* The last-level cache a CPU transfer can count on: sysfs's size when there is one (the kernel's
 * view, the guest's share in a VM), else CPUID's (sysconf), capped at KVC_LLC_CPUID_CAP because in
 * a VM without sysfs cache information CPUID may report the host's whole cache (508 MiB on a
 * 2-vCPU EPYC guest). sysconf_bytes <= 0: CPUID reports nothing. */
void kvc_sys_llc_resolve(int64_t sysfs_bytes, int64_t sysconf_bytes, kvc_llc_info_t *out);

/* MemFree of a NUMA node in bytes, -1 when unknown. */
int64_t kvc_sys_node_free_bytes(unsigned node);
/* Free hugetlb pages of page_size bytes on a node, -1 when unknown. */
int64_t kvc_sys_node_free_hugepages(unsigned node, size_t page_size);

#endif
