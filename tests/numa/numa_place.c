/* SPDX-License-Identifier: BSD-3-Clause */
/* NUMA placement on a real two-node kernel (run inside the VM that tests/numa/run_vm.sh boots; see
 * docs/MEMORY.md). Each allocation goes through kvcore's public API and is then checked page by
 * page with the kernel's own answers: move_pages(2) with no target nodes (where is each page),
 * get_mempolicy(2) with MPOL_F_ADDR (which policy covers the range), the per-node numastat
 * counters (which CPU's node faulted the pages in) and the per-node hugetlb pools. kvcore's report
 * is compared against that witness, never used as one. Output is TAP on stdout.
 *
 * Expects node 0 with CPU 0, node 1 with CPU 1 and less memory than node 0, and a display-class PCI
 * device whose sysfs numa_node is 1. Needs root (it sizes the hugetlb pools). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <kvcore.h>

#define MiB ((size_t)1 << 20)
#define HUGE_2M ((size_t)2 << 20)

static int test_no, failed;

static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %d - ", ok ? "ok" : "not ok", ++test_no);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!ok) failed++;
}

static void diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* ---------------------------------------------------------------- the kernel's witness */

/* Pages per node of [p, p+len) by move_pages(2) with nodes = NULL (query only), one entry per
 * `step` bytes. counts[0], counts[1]: pages on node 0 and 1; *other: pages elsewhere or not present. */
typedef struct {
    uint64_t node[2], other, total;
} where_t;

static where_t where(const void *p, size_t len, size_t step)
{
    where_t w = { { 0, 0 }, 0, 0 };
    enum { BATCH = 4096 };
    static void *pages[BATCH];
    static int status[BATCH];
    for (size_t off = 0; off < len;) {
        size_t n = 0;
        for (; n < BATCH && off < len; n++, off += step) pages[n] = (char *)p + off;
        if (syscall(SYS_move_pages, 0, (unsigned long)n, pages, NULL, status, 0) != 0) {
            diag("move_pages: %s", strerror(errno));
            w.other += n;
            w.total += n;
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (status[i] == 0 || status[i] == 1) w.node[status[i]]++;
            else w.other++;
        }
        w.total += n;
    }
    return w;
}

/* The policy covering address p: mode (MPOL_*) and node mask (bits 0..63). -1 on error. */
static int policy_at(const void *p, unsigned long *mask)
{
    int mode = -1;
    unsigned long m[16] = { 0 };
    if (syscall(SYS_get_mempolicy, &mode, m, (unsigned long)(sizeof(m) * 8), p, (unsigned long)MPOL_F_ADDR) != 0) {
        diag("get_mempolicy: %s", strerror(errno));
        return -1;
    }
    *mask = m[0];
    return mode;
}

static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static int write_long(const char *path, long v)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fprintf(f, "%ld\n", v) > 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* A counter of /sys/devices/system/node/nodeN/numastat ("local_node", "other_node"). */
static long numastat(int node, const char *key)
{
    char path[96], k[32];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/numastat", node);
    FILE *f = fopen(path, "r");
    long v, r = -1;
    if (!f) return -1;
    while (fscanf(f, "%31s %ld", k, &v) == 2)
        if (!strcmp(k, key)) r = v;
    fclose(f);
    return r;
}

static const char *hp_path(int node, const char *what)
{
    static char path[128];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/%s", node, what);
    return path;
}

/* VmLck of this process in kB (/proc/self/status). */
static long vmlck_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmLck: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static int run_on_cpu(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof(s), &s);
}

/* Pages the report's samples put on `node`. */
static uint64_t report_pages(const kvc_mem_report_t *r, unsigned node)
{
    for (unsigned i = 0; i < r->location_count && i < KVC_MEM_REPORT_NODES; i++)
        if (r->location[i].os_index == node) return r->location[i].pages;
    return 0;
}

/* ---------------------------------------------------------------- allocations */

static kvc_context_t *ctx;
static char gpu_bus_id[32];

static kvc_mem_params_t params(unsigned kind, kvc_mem_target_t target, unsigned node, kvc_mem_policy_t policy)
{
    return (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_TARGET | KVC_MEM_PARAM_POLICY,
                               .kind = kind | KVC_MEM_NUMA,
                               .target = target,
                               .node = node,
                               .pci_bus_id = gpu_bus_id,
                               .policy = policy };
}

#ifndef MPOL_PREFERRED_MANY
#define MPOL_PREFERRED_MANY 5 /* Linux 5.15 */
#endif

/* Every page of an allocation on `node`, by move_pages; the policy get_mempolicy sees is
 * `mode` on that node alone; kvcore's report agrees. step: the page size to walk by. A preferred
 * binding is MPOL_PREFERRED_MANY where the kernel has it (hwloc 2.9 on Linux 5.15+ asks for it;
 * with one node it means the same as MPOL_PREFERRED). */
static void expect_all_on(const char *what, void *p, const kvc_mem_report_t *r, size_t step, int node, int mode)
{
    const where_t w = where(p, r->mapped_size, step);
    check(w.total > 0 && w.node[node] == w.total, "%s: all %" PRIu64 " pages on node %d by move_pages (node0 %" PRIu64
          ", node1 %" PRIu64 ", elsewhere/absent %" PRIu64 ")", what, w.total, node, w.node[0], w.node[1], w.other);
    unsigned long mask = 0;
    const int m = policy_at(p, &mask);
    check((m == mode || (mode == MPOL_PREFERRED && m == MPOL_PREFERRED_MANY)) && mask == (1ul << node), "%s: get_mempolicy says mode %d mask 0x%lx (want %s, mask 0x%lx)",
          what, m, mask, mode == MPOL_BIND ? "MPOL_BIND 2" : "MPOL_PREFERRED 1 or MPOL_PREFERRED_MANY 5", 1ul << node);
    check(r->numa_bound == node && r->numa_requested == node && r->location_known && r->location_count == 1 &&
              report_pages(r, (unsigned)node) == r->pages_sampled && r->pages_unplaced == 0,
          "%s: report agrees (bound %d, requested %d, %u node(s), %" PRIu64 "/%" PRIu64 " sampled pages on node %d)",
          what, r->numa_bound, r->numa_requested, r->location_count, report_pages(r, (unsigned)node), r->pages_sampled,
          node);
}

static void *alloc_ok(const char *what, size_t size, const kvc_mem_params_t *p, kvc_mem_report_t *r)
{
    void *ptr = NULL;
    const kvc_status_t st = kvc_mem_alloc(ctx, size, p, &ptr, r);
    if (st != KVC_OK) {
        check(0, "%s: kvc_mem_alloc %s: %s", what, kvc_status_name(st), kvc_last_error());
        return NULL;
    }
    return ptr;
}

static void placed(const char *what, size_t size, kvc_mem_params_t p, int node)
{
    kvc_mem_report_t r;
    void *ptr = alloc_ok(what, size, &p, &r);
    if (!ptr) return;
    const size_t step = r.pages_kind == KVC_MEM_PAGES_HUGETLB ? HUGE_2M : (size_t)sysconf(_SC_PAGESIZE);
    expect_all_on(what, ptr, &r, step,
                  node, p.policy == KVC_MEM_POLICY_STRICT ? MPOL_BIND : MPOL_PREFERRED);
    kvc_mem_free(ctx, ptr);
}

/* ---------------------------------------------------------------- the checks */

static void check_machine(void)
{
    const int two = access("/sys/devices/system/node/node0/cpu0", F_OK) == 0 &&
                    access("/sys/devices/system/node/node1/cpu1", F_OK) == 0 &&
                    access("/sys/devices/system/node/node2", F_OK) != 0;
    check(two, "the kernel sees two NUMA nodes, CPU 0 on node 0 and CPU 1 on node 1");
    check(kvc_topology_numa_count(ctx) == 2, "kvcore's topology has %d NUMA nodes (want 2)", kvc_topology_numa_count(ctx));

    /* The display device on the expander bus, found in sysfs (class 0x03xxxx) with numa_node 1. */
    DIR *d = opendir("/sys/bus/pci/devices");
    struct dirent *e;
    long sys_node = -9;
    while (d && (e = readdir(d))) {
        char path[300];
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
        FILE *f = fopen(path, "r");
        unsigned cls = 0;
        if (!f) continue;
        if (fscanf(f, "%x", &cls) == 1 && (cls >> 16) == 0x03) {
            snprintf(gpu_bus_id, sizeof(gpu_bus_id), "%.31s", e->d_name);
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", e->d_name);
            sys_node = read_long(path);
        }
        fclose(f);
    }
    if (d) closedir(d);
    check(gpu_bus_id[0] && sys_node == 1, "display device %s has sysfs numa_node %ld (want 1)", gpu_bus_id, sys_node);
    int found = 0;
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        if (kvc_topology_gpu(ctx, i, &g) == KVC_OK && !strcmp(g.bus_id, gpu_bus_id)) found = g.numa_node == 1 ? 1 : -1;
    }
    check(found == 1, "kvc_topology_gpu lists %s on node 1", gpu_bus_id);
    int node = -1;
    const kvc_status_t st = kvc_topology_numa_of_pci(ctx, gpu_bus_id, &node);
    check(st == KVC_OK && node == 1, "kvc_topology_numa_of_pci(%s) = %d (%s)", gpu_bus_id, node, kvc_status_name(st));
}

static void check_targets(void)
{
    run_on_cpu(0);
    placed("node 1 strict", 16 * MiB, params(0, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_STRICT), 1);
    placed("node 1 preferred", 16 * MiB, params(0, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_PREFERRED), 1);
    placed("node 0 strict", 16 * MiB, params(0, KVC_MEM_TARGET_NODE, 0, KVC_MEM_POLICY_STRICT), 0);
    placed("PCI bus id strict", 16 * MiB, params(0, KVC_MEM_TARGET_PCI, 0, KVC_MEM_POLICY_STRICT), 1);
    placed("PCI bus id preferred", 16 * MiB, params(0, KVC_MEM_TARGET_PCI, 0, KVC_MEM_POLICY_PREFERRED), 1);
    run_on_cpu(1);
    placed("local from CPU 1", 16 * MiB, params(0, KVC_MEM_TARGET_LOCAL, 0, KVC_MEM_POLICY_STRICT), 1);
    run_on_cpu(0);
    placed("local from CPU 0", 16 * MiB, params(0, KVC_MEM_TARGET_LOCAL, 0, KVC_MEM_POLICY_STRICT), 0);
}

static void check_kinds(void)
{
    run_on_cpu(0);
    /* Pinned: the kernel's locked-page count grows by the size. */
    const long lck0 = vmlck_kb();
    kvc_mem_params_t p = params(KVC_MEM_PINNED, KVC_MEM_TARGET_PCI, 0, KVC_MEM_POLICY_STRICT);
    kvc_mem_report_t r;
    void *ptr = alloc_ok("pinned", 16 * MiB, &p, &r);
    if (ptr) {
        const long lck = vmlck_kb();
        check(lck - lck0 == (long)(16 * MiB / 1024) && r.pinned, "pinned: VmLck grew by %ld kB (want %zu), report pinned %d",
              lck - lck0, 16 * MiB / 1024, r.pinned);
        expect_all_on("pinned, PCI bus id", ptr, &r, (size_t)sysconf(_SC_PAGESIZE), 1, MPOL_BIND);
        kvc_mem_free(ctx, ptr);
    }

    /* Shared: the creator's pages and another mapping of the same segment are on node 1. */
    char name[64];
    snprintf(name, sizeof(name), "/kvcore-numa-%d", (int)getpid());
    p = params(KVC_MEM_SHARED | KVC_MEM_PINNED, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_STRICT);
    p.field_mask |= KVC_MEM_PARAM_NAME;
    p.name = name;
    ptr = alloc_ok("shared", 16 * MiB, &p, &r);
    if (ptr) {
        expect_all_on("shared+pinned, node 1", ptr, &r, (size_t)sysconf(_SC_PAGESIZE), 1, MPOL_BIND);
        void *other = NULL;
        size_t size = 0;
        kvc_mem_report_t ra;
        const kvc_status_t st = kvc_mem_attach(ctx, name, KVC_MEM_SHARED, &other, &size, &ra);
        /* A fresh mapping has no page table entries yet: read every page (a read fault maps the
         * segment's existing page, it allocates nothing) before asking where the pages are. */
        for (size_t off = 0; st == KVC_OK && off < size; off += (size_t)sysconf(_SC_PAGESIZE))
            (void)((volatile const char *)other)[off];
        const where_t w = st == KVC_OK ? where(other, size, (size_t)sysconf(_SC_PAGESIZE)) : (where_t){ { 0, 0 }, 0, 0 };
        check(st == KVC_OK && w.total == 16 * MiB / (size_t)sysconf(_SC_PAGESIZE) && w.node[1] == w.total,
              "shared: an attached mapping sees %" PRIu64 "/%" PRIu64 " pages on node 1 (%s)", w.node[1], w.total,
              kvc_status_name(st));
        if (st == KVC_OK) kvc_mem_free(ctx, other);
        kvc_mem_free(ctx, ptr);
    }

    /* hugetlb: 2 MiB pages taken from node 1's own pool. */
    const long free1 = read_long(hp_path(1, "free_hugepages"));
    p = params(KVC_MEM_HUGEPAGE | KVC_MEM_PINNED, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_STRICT);
    ptr = alloc_ok("hugepage", 8 * MiB, &p, &r);
    if (ptr) {
        const long used = free1 - read_long(hp_path(1, "free_hugepages"));
        check(r.pages_kind == KVC_MEM_PAGES_HUGETLB && used == 4,
              "hugepage+pinned: hugetlb pages (kind %d), node 1's pool gave %ld pages (want 4)", (int)r.pages_kind, used);
        expect_all_on("hugepage+pinned, node 1", ptr, &r, HUGE_2M, 1, MPOL_BIND);
        kvc_mem_free(ctx, ptr);
    }
}

/* More than all hugetlb pools hold: preferred falls back to transparent hugepages (the guest boots
 * with transparent_hugepage=madvise), still on node 1. */
static void check_thp(void)
{
    run_on_cpu(0);
    const long pool = read_long(hp_path(0, "free_hugepages")) + read_long(hp_path(1, "free_hugepages"));
    const size_t size = (size_t)(pool + 8) * HUGE_2M;
    kvc_mem_params_t p = params(KVC_MEM_HUGEPAGE, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_PREFERRED);
    kvc_mem_report_t r;
    void *ptr = alloc_ok("thp", size, &p, &r);
    if (!ptr) return;
    check(r.pages_kind == KVC_MEM_PAGES_THP && (r.fallbacks & KVC_MEM_FALLBACK_NO_HUGETLB),
          "hugepage beyond the hugetlb pools (%ld pages): transparent hugepages (kind %d, fallbacks 0x%x)", pool,
          (int)r.pages_kind, (unsigned)r.fallbacks);
    expect_all_on("transparent hugepages, node 1", ptr, &r, (size_t)sysconf(_SC_PAGESIZE), 1, MPOL_PREFERRED);
    kvc_mem_free(ctx, ptr);
}

/* Node 1 cannot hold the request, node 0 can. */
static void check_short_node(void)
{
    run_on_cpu(0);
    kvc_numa_node_info_t n1 = { 0 };
    for (int i = 0; i < kvc_topology_numa_count(ctx); i++) {
        kvc_numa_node_info_t n;
        if (kvc_topology_numa_node(ctx, i, &n) == KVC_OK && n.os_index == 1) n1 = n;
    }
    const size_t big = (size_t)(n1.total_bytes + 128 * MiB) & ~(MiB - 1);
    diag("node 1 has %" PRIu64 " bytes; asking for %zu", n1.total_bytes, big);

    void *ptr = NULL;
    kvc_mem_params_t p = params(0, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_STRICT);
    kvc_status_t st = kvc_mem_alloc(ctx, big, &p, &ptr, NULL);
    const size_t live = kvc_mem_live_count(ctx);
    if (st == KVC_OK) kvc_mem_free(ctx, ptr);
    check(st == KVC_ERR_PLACEMENT && live == 0,
          "strict on node 1, more than the node has: %s (want KVC_ERR_PLACEMENT), nothing live", kvc_status_name(st));

    kvc_mem_report_t r;
    p = params(0, KVC_MEM_TARGET_NODE, 0, KVC_MEM_POLICY_STRICT);
    ptr = alloc_ok("strict node 0 big", big, &p, &r);
    if (ptr) {
        expect_all_on("strict on node 0, same size", ptr, &r, (size_t)sysconf(_SC_PAGESIZE), 0, MPOL_BIND);
        kvc_mem_free(ctx, ptr);
    }

    /* Preferred spills to node 0 once node 1 is full, and the report's samples say so. */
    p = params(0, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_PREFERRED);
    ptr = alloc_ok("preferred node 1 big", big, &p, &r);
    if (ptr) {
        const where_t w = where(ptr, r.mapped_size, (size_t)sysconf(_SC_PAGESIZE));
        check(w.other == 0 && w.node[1] > w.total / 2 && w.node[0] > 0,
              "preferred on node 1, more than the node has: node1 %" PRIu64 " pages, node0 %" PRIu64 " (spilled), absent %" PRIu64,
              w.node[1], w.node[0], w.other);
        const double wit = (double)w.node[1] / (double)w.total;
        const double rep = r.pages_sampled ? (double)report_pages(&r, 1) / (double)r.pages_sampled : -1;
        check(r.numa_bound == 1 && r.location_count == 2 && report_pages(&r, 0) > 0 && rep > wit - 0.02 && rep < wit + 0.02,
              "preferred spill: report bound %d, %u nodes, %.3f of samples on node 1 vs %.3f of pages by move_pages",
              r.numa_bound, r.location_count, rep, wit);
        kvc_mem_free(ctx, ptr);
    }

    /* hugetlb: node 1's pool is short, node 0's is not. */
    const long f0 = read_long(hp_path(0, "free_hugepages")), f1 = read_long(hp_path(1, "free_hugepages"));
    const size_t hp_bytes = (size_t)(f1 + 2) * HUGE_2M;
    diag("free hugetlb pages: node 0 %ld, node 1 %ld; asking for %zu pages", f0, f1, hp_bytes / HUGE_2M);
    p = params(KVC_MEM_HUGEPAGE, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_STRICT);
    st = kvc_mem_alloc(ctx, hp_bytes, &p, &ptr, NULL);
    if (st == KVC_OK) kvc_mem_free(ctx, ptr);
    check(f0 >= f1 + 2 && st == KVC_ERR_LIMIT, "strict hugepages on node 1, more than its pool: %s (want KVC_ERR_LIMIT)",
          kvc_status_name(st));
    p = params(KVC_MEM_HUGEPAGE, KVC_MEM_TARGET_NODE, 0, KVC_MEM_POLICY_STRICT);
    ptr = alloc_ok("strict hugepages node 0", hp_bytes, &p, &r);
    if (ptr) {
        expect_all_on("strict hugepages on node 0, same size", ptr, &r, HUGE_2M, 0, MPOL_BIND);
        kvc_mem_free(ctx, ptr);
    }
    p = params(KVC_MEM_HUGEPAGE, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_PREFERRED);
    ptr = alloc_ok("preferred hugepages node 1", hp_bytes, &p, &r);
    if (ptr) {
        const where_t w = where(ptr, r.mapped_size, HUGE_2M);
        check(r.pages_kind == KVC_MEM_PAGES_HUGETLB && w.node[1] == (uint64_t)f1 && w.node[0] == 2,
              "preferred hugepages on node 1: node1 %" PRIu64 " pages (want %ld), node0 %" PRIu64 " (want 2)", w.node[1],
              f1, w.node[0]);
        const double wit = (double)w.node[1] / (double)w.total;
        const double rep = r.pages_sampled ? (double)report_pages(&r, 1) / (double)r.pages_sampled : -1;
        check(r.location_count == 2 && rep > wit - 0.01 && rep < wit + 0.01,
              "preferred hugepages: report has %.3f of samples on node 1 (%u nodes) vs %.3f by move_pages", rep,
              r.location_count, wit);
        kvc_mem_free(ctx, ptr);
    }
}

/* The first-touch threads run on node 1's CPU: node 1's numastat counts the pages as allocated by
 * a task running on node 1 (local_node), not elsewhere (other_node). The control touches the same
 * binding from CPU 0 and must show up as other_node, so the witness can tell the two apart. */
static void check_first_touch(void)
{
    run_on_cpu(0);
    const size_t size = 32 * MiB;
    const long pages = (long)(size / (size_t)sysconf(_SC_PAGESIZE));
    long l0 = numastat(1, "local_node"), o0 = numastat(1, "other_node");
    kvc_mem_params_t p = params(0, KVC_MEM_TARGET_NODE, 1, KVC_MEM_POLICY_STRICT);
    kvc_mem_report_t r;
    void *ptr = alloc_ok("first touch", size, &p, &r);
    if (ptr) {
        const long dl = numastat(1, "local_node") - l0, dot = numastat(1, "other_node") - o0;
        check(dl >= pages && dot < pages / 20 && !(r.fallbacks & KVC_MEM_FALLBACK_TOUCH_UNBOUND),
              "first touch from a CPU 0 caller: node 1 numastat local_node +%ld, other_node +%ld (%ld pages)", dl, dot,
              pages);
        kvc_mem_free(ctx, ptr);
    }
    p.field_mask |= KVC_MEM_PARAM_TOUCH;
    p.touch = 0;
    ptr = alloc_ok("no touch", size, &p, &r);
    if (ptr) {
        l0 = numastat(1, "local_node");
        o0 = numastat(1, "other_node");
        memset(ptr, 1, size);
        const long dl = numastat(1, "local_node") - l0, dot = numastat(1, "other_node") - o0;
        check(dot >= pages && dl < pages / 20, "control, touched by the CPU 0 caller: other_node +%ld, local_node +%ld",
              dot, dl);
        kvc_mem_free(ctx, ptr);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Hugetlb pools: node 0 larger than node 1, so "node 1 short, node 0 not" can be set up. */
    if (write_long(hp_path(0, "nr_hugepages"), 16) != 0 || write_long(hp_path(1, "nr_hugepages"), 8) != 0)
        diag("cannot size the hugetlb pools: %s", strerror(errno));
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                                .backend = "cpu",
                                .num_threads = 2 };
    if (kvc_context_create(&cp, &ctx) != KVC_OK) {
        printf("Bail out! kvc_context_create: %s\n", kvc_last_error());
        return 1;
    }
    check_machine();
    check_targets();
    check_kinds();
    check_thp();
    check_short_node();
    check_first_touch();
    kvc_context_destroy(ctx);
    printf("1..%d\n", test_no);
    return failed ? 1 : 0;
}
