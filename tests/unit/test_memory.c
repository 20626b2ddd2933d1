/* SPDX-License-Identifier: BSD-3-Clause */
/* Host memory: allocation kinds and their reports (checked against hwloc's and the kernel's own
 * view), placement policies on the real machine and on recorded topologies, shared memory across
 * processes, limits (tmpfs size, RLIMIT_MEMLOCK, hugepages), copies against scalar oracles, leak
 * accounting, and the sysfs/cgroup readers. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <hwloc.h>
#include <kvcore.h>
#include <kvcore/backend.h> /* kvc_copy_split_piece */

#include "ref/memory_ref.h"
#include "sysinfo.h"
#include "test_util.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define TOPO_8NODES "topologies/16amd64-4distances.xml"
#define TOPO_DGX2 "topologies/nvidiaDGX2.xml"

/* ---------------------------------------------------------------- helpers */

static kvc_context_t *real_ctx(void)
{
    unsetenv("HWLOC_XMLFILE");
    return kvc_test_cpu_context();
}

static kvc_context_t *xml_ctx(const char *path)
{
    setenv("HWLOC_XMLFILE", path, 1);
    return kvc_test_cpu_context();
}

/* A context for a forked child: one thread, because libgomp cannot start threads in a child forked
 * after the parent ran a parallel region. NULL on failure. */
static kvc_context_t *child_ctx(void)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu",
                               .num_threads = 1 };
    kvc_context_t *ctx = NULL;
    return kvc_context_create(&p, &ctx) == KVC_OK ? ctx : NULL;
}

static kvc_mem_params_t kind_params(unsigned kind)
{
    return (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_KIND, .kind = kind };
}

static kvc_mem_params_t node_params(unsigned kind, unsigned node, kvc_mem_policy_t policy)
{
    return (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_TARGET | KVC_MEM_PARAM_POLICY,
                               .kind = kind | KVC_MEM_NUMA,
                               .target = KVC_MEM_TARGET_NODE,
                               .node = node,
                               .policy = policy };
}

static kvc_mem_params_t shm_params(unsigned kind, const char *name)
{
    return (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_NAME,
                               .kind = kind | KVC_MEM_SHARED,
                               .name = name };
}

static const char *shm_name(const char *tag)
{
    static char buf[4][64];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, 64, "/kvc-test-%d-%s", (int)getpid(), tag);
    shm_unlink(b); /* never left over: the pid is ours */
    return b;
}

static int shm_exists(const char *name)
{
    const int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

static hwloc_topology_t real_topology(void)
{
    hwloc_topology_t t;
    cr_assert_eq(hwloc_topology_init(&t), 0);
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    cr_assert_eq(hwloc_topology_load(t), 0);
    return t;
}

/* A field of /proc/self/status in bytes (kB figures). */
static uint64_t status_kb_field(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    uint64_t kb = 0;
    const size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, klen) && line[klen] == ':') kb = strtoull(line + klen + 1, NULL, 10);
    fclose(f);
    return kb * 1024;
}

/* A "Name: N kB" field of the /proc/self/smaps entry that contains p, in bytes. */
static uint64_t smaps_field(const void *p, const char *key)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert_not_null(f);
    char line[512];
    int inside = 0;
    uint64_t v = 0;
    const size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        uintptr_t lo, hi;
        char perms[8];
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &lo, &hi, perms) == 3) {
            if (inside) break;
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && !strncmp(line, key, klen) && line[klen] == ':') {
            v = strtoull(line + klen + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

/* Run fn in a forked child; returns its exit status. A child killed by a signal (a SIGBUS, say)
 * fails the test. */
static int run_child(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    const pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) _exit(fn(arg));
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert_not(WIFSIGNALED(status), "child killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return WEXITSTATUS(status);
}

#define CHILD_SKIP 77

/* The report's page locations must be exactly what hwloc says for the whole range (every page is
 * sampled below KVC_MEM_LOCATION_SAMPLES pages). */
static void assert_location_matches_hwloc(hwloc_topology_t t, const void *p, const kvc_mem_report_t *r)
{
    cr_assert(r->location_known);
    cr_assert_eq(r->pages_total, r->mapped_size / (size_t)sysconf(_SC_PAGESIZE));
    cr_assert_eq(r->pages_sampled, r->pages_total < KVC_MEM_LOCATION_SAMPLES ? r->pages_total : KVC_MEM_LOCATION_SAMPLES);
    hwloc_nodeset_t hw = hwloc_bitmap_alloc(), mine = hwloc_bitmap_alloc();
    cr_assert_eq(hwloc_get_area_memlocation(t, p, r->mapped_size, hw, HWLOC_MEMBIND_BYNODESET), 0);
    uint64_t placed = 0;
    for (unsigned i = 0; i < r->location_count && i < KVC_MEM_REPORT_NODES; i++) {
        hwloc_bitmap_set(mine, r->location[i].os_index);
        placed += r->location[i].pages;
    }
    char a[64], b[64];
    hwloc_bitmap_list_snprintf(a, sizeof(a), hw);
    hwloc_bitmap_list_snprintf(b, sizeof(b), mine);
    cr_assert(hwloc_bitmap_isequal(hw, mine), "hwloc says nodes %s, the report says %s", a, b);
    cr_assert_eq(placed + r->pages_unplaced, r->pages_sampled);
    hwloc_bitmap_free(hw);
    hwloc_bitmap_free(mine);
}

/* hwloc's view of the binding of [p, p+len): policy and node set. */
static hwloc_membind_policy_t area_binding(hwloc_topology_t t, const void *p, size_t len, hwloc_nodeset_t set)
{
    hwloc_membind_policy_t policy;
    cr_assert_eq(hwloc_get_area_membind(t, p, len, set, &policy, HWLOC_MEMBIND_BYNODESET), 0, "%s", strerror(errno));
    return policy;
}

static void fill_pattern(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)(seed + i * 131u + (i >> 9));
}

/* ---------------------------------------------------------------- plain allocations */

Test(memory, plain_alignment_small_sizes)
{
    kvc_context_t *ctx = real_ctx();
    const size_t sizes[] = { 1, 4095, 4096, 8192, MiB };
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        void *p = NULL;
        kvc_mem_report_t r;
        cr_assert_eq(kvc_mem_alloc(ctx, sizes[i], NULL, &p, &r), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq((uintptr_t)p % 4096, 0, "size %zu: %p not page-aligned", sizes[i], p);
        cr_assert_eq(r.size, sizes[i]);
        cr_assert_eq(r.mapped_size, (sizes[i] + page - 1) / page * page);
        cr_assert_eq(r.page_size, page);
        cr_assert_eq(r.pages_kind, KVC_MEM_PAGES_NORMAL);
        cr_assert_eq(r.kind_requested, KVC_MEM_PLAIN);
        cr_assert_eq(r.kind_obtained, KVC_MEM_PLAIN);
        cr_assert_eq(r.pinned, 0);
        cr_assert_eq(r.numa_bound, -1);
        cr_assert_eq(r.fallbacks, 0);
        cr_assert_str_empty(r.fallback_text);
        cr_assert_eq(r.pages_unplaced, 0, "touched pages must all be resident");
        memset(p, 0xa5, sizes[i]);
        cr_assert_eq(((unsigned char *)p)[sizes[i] - 1], 0xa5);
        cr_assert_eq(kvc_mem_free(ctx, p), KVC_OK);
    }
    cr_assert_eq(kvc_mem_live_count(ctx), 0);
    kvc_context_destroy(ctx);
}

Test(memory, multi_gib_pool_untouched)
{
    kvc_context_t *ctx = real_ctx();
    const size_t size = 3 * GiB + 12345;
    kvc_mem_params_t p = { .field_mask = KVC_MEM_PARAM_TOUCH, .touch = 0 };
    void *ptr = NULL;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, size, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq((uintptr_t)ptr % 4096, 0);
    cr_assert_geq(r.mapped_size, size);
    cr_assert_eq(r.pages_sampled, KVC_MEM_LOCATION_SAMPLES);
    cr_assert_eq(r.pages_unplaced, r.pages_sampled, "nothing was touched, so no page is resident");
    char *c = ptr;
    c[0] = 1;
    c[size / 2] = 2;
    c[size - 1] = 3;
    cr_assert_eq(c[0] + c[size / 2] + c[size - 1], 6);
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    kvc_context_destroy(ctx);
}

Test(memory, invalid_params)
{
    kvc_context_t *ctx = real_ctx();
    void *p = (void *)0x1;
    kvc_mem_params_t q;
#define BAD(size, params)                                                                                            \
    do {                                                                                                             \
        cr_assert_eq(kvc_mem_alloc(ctx, size, params, &p, NULL), KVC_ERR_INVALID_ARG, "line %d", __LINE__);          \
        cr_assert_eq(p, (void *)0x1, "out touched on failure (line %d)", __LINE__);                                 \
    } while (0)
    cr_assert_eq(kvc_mem_alloc(NULL, 4096, NULL, &p, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, NULL, NULL, NULL), KVC_ERR_INVALID_ARG);
    BAD(0, NULL);
    BAD(SIZE_MAX, NULL);
    q = (kvc_mem_params_t){ .field_mask = 1u << 20 };
    BAD(4096, &q);
    cr_assert(strstr(kvc_last_error(), "unknown bits"), "%s", kvc_last_error());
    q = kind_params(1u << 7);
    BAD(4096, &q);
    q = kind_params(KVC_MEM_HUGEPAGE);
    q.field_mask |= KVC_MEM_PARAM_NAME;
    q.kind |= KVC_MEM_SHARED;
    q.name = "/kvc-x";
    BAD(4096, &q);
    cr_assert(strstr(kvc_last_error(), "HUGEPAGE"), "%s", kvc_last_error());
    q = (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_TARGET, .target = KVC_MEM_TARGET_NODE };
    BAD(4096, &q); /* a target without KVC_MEM_NUMA */
    q = node_params(0, 0, KVC_MEM_POLICY_PREFERRED);
    q.target = (kvc_mem_target_t)7;
    BAD(4096, &q);
    q = node_params(0, 0, KVC_MEM_POLICY_PREFERRED);
    q.target = KVC_MEM_TARGET_PCI;
    q.pci_bus_id = NULL;
    BAD(4096, &q);
    q = node_params(0, 0, (kvc_mem_policy_t)5);
    BAD(4096, &q);
    q = shm_params(0, NULL);
    BAD(4096, &q);
    q = (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_NAME, .name = "/kvc-x" };
    BAD(4096, &q); /* a name without KVC_MEM_SHARED */
    q = (kvc_mem_params_t){ .field_mask = KVC_MEM_PARAM_PIN_CHUNK, .pin_chunk = 0 };
    BAD(4096, &q);
    q.pin_chunk = 100;
    BAD(4096, &q);
    /* A malformed PCI bus id is a bad argument whatever the policy. */
    q = node_params(0, 0, KVC_MEM_POLICY_PREFERRED);
    q.target = KVC_MEM_TARGET_PCI;
    q.pci_bus_id = "not-a-bus-id";
    BAD(4096, &q);
#undef BAD
    cr_assert_eq(kvc_mem_live_count(ctx), 0);
    kvc_context_destroy(ctx);
}

Test(memory, double_free_and_unknown_pointer)
{
    kvc_context_t *ctx = real_ctx();
    void *p;
    cr_assert_eq(kvc_mem_alloc(ctx, 3 * 4096, NULL, &p, NULL), KVC_OK);
    memset(p, 7, 3 * 4096);
    cr_assert_eq(kvc_mem_free(ctx, (char *)p + 4096), KVC_ERR_STATE, "an interior pointer is not an allocation");
    char *heap = malloc(64);
    cr_assert_eq(kvc_mem_free(ctx, heap), KVC_ERR_STATE);
    free(heap);
    int on_stack;
    cr_assert_eq(kvc_mem_free(ctx, &on_stack), KVC_ERR_STATE);
    cr_assert(strstr(kvc_last_error(), "not a live kvcore allocation"), "%s", kvc_last_error());
    /* The failed frees touched nothing. */
    cr_assert_eq(kvc_mem_live_count(ctx), 1);
    cr_assert_eq(((char *)p)[3 * 4096 - 1], 7);
    cr_assert_eq(kvc_mem_free(ctx, p), KVC_OK);
    cr_assert_eq(kvc_mem_free(ctx, p), KVC_ERR_STATE);
    cr_assert_eq(kvc_mem_free(ctx, NULL), KVC_OK);
    cr_assert_eq(kvc_mem_free(NULL, p), KVC_ERR_INVALID_ARG);
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_query(ctx, p, &r), KVC_ERR_STATE);
    kvc_context_destroy(ctx);
}

/* The address-reuse case: p freed, then more allocations of the same size (another thread's, in a
 * real program). The kernel used to hand p's address out again, and the second free of p then
 * released that allocation and returned OK. Freed ranges now stay reserved: the new allocations
 * get other addresses and the second free of p is KVC_ERR_STATE, leaving them intact. */
Test(memory, double_free_after_address_reuse)
{
    kvc_context_t *ctx = real_ctx();
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_AS, &rl), 0);
    if (rl.rlim_cur != RLIM_INFINITY) cr_skip_test("RLIMIT_AS is set: freed ranges are not kept reserved (docs/MEMORY.md)");
    const unsigned kinds[] = { KVC_MEM_PLAIN, KVC_MEM_PINNED };
    for (size_t k = 0; k < 2; k++) {
        kvc_mem_params_t mp = { .field_mask = KVC_MEM_PARAM_KIND, .kind = kinds[k] };
        void *p, *q[8];
        cr_assert_eq(kvc_mem_alloc(ctx, 64 * 1024, &mp, &p, NULL), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(kvc_mem_free(ctx, p), KVC_OK);
        for (int i = 0; i < 8; i++) {
            cr_assert_eq(kvc_mem_alloc(ctx, 64 * 1024, &mp, &q[i], NULL), KVC_OK);
            cr_assert_neq(q[i], p, "a freed address was handed out again");
            memset(q[i], i + 1, 64 * 1024);
        }
        cr_assert_eq(kvc_mem_free(ctx, p), KVC_ERR_STATE);
        cr_assert(strstr(kvc_last_error(), "already freed"), "%s", kvc_last_error());
        cr_assert_eq(kvc_mem_live_count(ctx), 8);
        for (int i = 0; i < 8; i++) {
            cr_assert_eq(((unsigned char *)q[i])[64 * 1024 - 1], i + 1);
            cr_assert_eq(kvc_mem_free(ctx, q[i]), KVC_OK);
        }
    }
    kvc_context_destroy(ctx);
}

/* The reserved ranges are bounded: 3000 frees of one page keep at most 1024 pages of address space
 * (VmSize), and context destroy releases them all. */
Test(memory, freed_range_reservations_are_bounded)
{
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_AS, &rl), 0);
    if (rl.rlim_cur != RLIM_INFINITY) cr_skip_test("RLIMIT_AS is set: no range is kept reserved");
    const int64_t page_kb = sysconf(_SC_PAGESIZE) / 1024, slack_kb = 2048; /* status_kb_field gives bytes */
    kvc_context_destroy(real_ctx()); /* per-process state (topology, thread pools) set up first */
    const int64_t before = (int64_t)status_kb_field("VmSize") / 1024;
    kvc_context_t *ctx = real_ctx();
    const int64_t with_ctx = (int64_t)status_kb_field("VmSize") / 1024;
    for (int i = 0; i < 3000; i++) {
        void *p;
        cr_assert_eq(kvc_mem_alloc(ctx, 4096, NULL, &p, NULL), KVC_OK);
        cr_assert_eq(kvc_mem_free(ctx, p), KVC_OK);
    }
    const int64_t after = (int64_t)status_kb_field("VmSize") / 1024;
    cr_assert_leq(after - with_ctx, 1024 * page_kb + slack_kb, "VmSize grew by %lld kB over 3000 frees",
                  (long long)(after - with_ctx));
    kvc_context_destroy(ctx);
    const int64_t end = (int64_t)status_kb_field("VmSize") / 1024;
    cr_assert_leq(end - before, slack_kb, "VmSize %lld kB above its value before the context", (long long)(end - before));
}

/* ---------------------------------------------------------------- reports against hwloc */

/* Every kind and combination on the real machine: the report's page locations equal hwloc's own
 * query, NUMA binding equals hwloc's view of the area's policy, pinning equals the kernel's locked
 * byte count, and page sizes equal what smaps shows. */
Test(memory, each_kind_report_matches_hwloc_and_kernel)
{
    kvc_context_t *ctx = real_ctx();
    hwloc_topology_t t = real_topology();
    const unsigned node0 = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, 0)->os_index;
    const unsigned kinds[] = {
        KVC_MEM_PLAIN,
        KVC_MEM_PINNED,
        KVC_MEM_NUMA,
        KVC_MEM_HUGEPAGE,
        KVC_MEM_NUMA | KVC_MEM_PINNED,
        KVC_MEM_NUMA | KVC_MEM_PINNED | KVC_MEM_HUGEPAGE,
        KVC_MEM_SHARED,
        KVC_MEM_SHARED | KVC_MEM_NUMA,
        KVC_MEM_SHARED | KVC_MEM_PINNED,
    };
    const size_t size = 6 * MiB + 100;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        const unsigned kind = kinds[k];
        char kname[64];
        kvc_mem_kind_name(kind, kname, sizeof(kname));
        /* Strict binding, except with hugepages, whose fallback (THP) only the preferred policy takes. */
        const kvc_mem_policy_t policy = (kind & KVC_MEM_HUGEPAGE) ? KVC_MEM_POLICY_PREFERRED : KVC_MEM_POLICY_STRICT;
        kvc_mem_params_t p = (kind & KVC_MEM_NUMA) ? node_params(kind, node0, policy) : kind_params(kind);
        if (kind & KVC_MEM_SHARED) {
            p.field_mask |= KVC_MEM_PARAM_NAME;
            p.name = shm_name("kinds");
        }
        const uint64_t locked_before = status_kb_field("VmLck");
        void *ptr = NULL;
        kvc_mem_report_t r;
        kvc_status_t st = kvc_mem_alloc(ctx, size, &p, &ptr, &r);
        if (st == KVC_ERR_PLACEMENT && strstr(kvc_last_error(), "refused")) {
            cr_log_warn("%s: NUMA binding refused on this machine (%s); checked in the fallback tests", kname,
                        kvc_last_error());
            continue;
        }
        cr_assert_eq(st, KVC_OK, "%s: %s (%s)", kname, kvc_status_name(st), kvc_last_error());
        cr_assert_eq((uintptr_t)ptr % r.page_size, 0, "%s", kname);
        cr_assert_eq(r.kind_requested, kind, "%s", kname);
        assert_location_matches_hwloc(t, ptr, &r);
        cr_assert_eq(r.pages_unplaced, 0, "%s: every page was touched", kname);

        /* Binding: the report and hwloc's view of the area agree. */
        hwloc_nodeset_t set = hwloc_bitmap_alloc();
        const hwloc_membind_policy_t pol = area_binding(t, ptr, r.mapped_size, set);
        if (kind & KVC_MEM_NUMA) {
            cr_assert_eq(r.numa_bound, (int)node0, "%s", kname);
            cr_assert(r.kind_obtained & KVC_MEM_NUMA, "%s", kname);
            cr_assert_eq(pol, HWLOC_MEMBIND_BIND, "%s: hwloc sees policy %d", kname, (int)pol);
            cr_assert(hwloc_bitmap_isset(set, node0) && hwloc_bitmap_weight(set) == 1, "%s", kname);
            cr_assert_eq(r.location_count, 1);
            cr_assert_eq(r.location[0].os_index, node0);
        } else {
            cr_assert_eq(r.numa_bound, -1, "%s", kname);
            cr_assert_not(r.kind_obtained & KVC_MEM_NUMA, "%s", kname);
            cr_assert_neq(pol, HWLOC_MEMBIND_BIND, "%s: memory bound although NUMA was not asked", kname);
        }
        hwloc_bitmap_free(set);

        /* Pinning: the kernel's count of locked bytes grew by the whole mapping, or not at all. */
        const uint64_t locked = status_kb_field("VmLck") - locked_before;
        if (kind & KVC_MEM_PINNED) {
            cr_assert(r.pinned && (r.kind_obtained & KVC_MEM_PINNED), "%s", kname);
            cr_assert_eq(r.pin_calls, 1, "%s: one chunk below the default chunk size", kname);
            /* hugetlb pages are never swapped out, and the kernel does not count them in VmLck. */
            if (r.pages_kind == KVC_MEM_PAGES_HUGETLB) cr_assert_eq(smaps_field(ptr, "KernelPageSize"), 2 * MiB);
            else cr_assert_geq(locked, r.mapped_size, "%s: reported pinned but VmLck grew by %" PRIu64, kname, locked);
        } else {
            cr_assert_not(r.pinned, "%s", kname);
            cr_assert_eq(locked, 0, "%s", kname);
        }

        /* Page size: what smaps shows for the mapping. */
        const uint64_t kernel_page = smaps_field(ptr, "KernelPageSize");
        if (kind & KVC_MEM_HUGEPAGE) {
            cr_assert(r.kind_obtained & KVC_MEM_HUGEPAGE, "%s", kname);
            cr_assert_eq(r.mapped_size % (2 * MiB), 0);
            if (r.pages_kind == KVC_MEM_PAGES_HUGETLB) {
                cr_assert_eq(kernel_page, 2 * MiB);
                cr_assert_eq(r.page_size, 2 * MiB);
                cr_assert_eq(r.huge_bytes, r.mapped_size);
            } else {
                cr_assert(r.fallbacks & KVC_MEM_FALLBACK_NO_HUGETLB, "%s: %s", kname, r.fallback_text);
                cr_assert_eq(kernel_page, (uint64_t)sysconf(_SC_PAGESIZE));
                cr_assert_eq(r.page_size, (size_t)sysconf(_SC_PAGESIZE));
                if (r.pages_kind == KVC_MEM_PAGES_THP)
                    cr_assert_eq(r.huge_bytes, smaps_field(ptr, "AnonHugePages"), "%s", kname);
                else
                    cr_assert_eq(r.huge_bytes, 0);
            }
        } else {
            cr_assert_eq(kernel_page, (uint64_t)sysconf(_SC_PAGESIZE), "%s", kname);
            cr_assert_eq(r.pages_kind, KVC_MEM_PAGES_NORMAL);
            cr_assert_eq(r.huge_bytes, 0);
        }
        if (kind & KVC_MEM_SHARED) {
            cr_assert(r.kind_obtained & KVC_MEM_SHARED);
            cr_assert_str_eq(r.name, p.name);
            cr_assert(shm_exists(p.name));
        }
        /* kvc_mem_query says the same later. */
        kvc_mem_report_t again;
        cr_assert_eq(kvc_mem_query(ctx, ptr, &again), KVC_OK);
        cr_assert_eq(again.kind_obtained, r.kind_obtained);
        cr_assert_eq(again.numa_bound, r.numa_bound);
        cr_assert_eq(again.pinned, r.pinned);
        cr_assert_eq(again.location_count, r.location_count);
        cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK, "%s", kname);
        cr_assert_eq(status_kb_field("VmLck"), locked_before, "%s: unpinned on free", kname);
        if (kind & KVC_MEM_SHARED) cr_assert_not(shm_exists(p.name), "%s: the creator unlinks", kname);
    }
    hwloc_topology_destroy(t);
    kvc_context_destroy(ctx);
}

Test(memory, local_target_binds_to_the_callers_node)
{
    kvc_context_t *ctx = real_ctx();
    hwloc_topology_t t = real_topology();
    /* Pin this thread to the first PU so "local" has one answer. */
    hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, 0);
    cr_assert_eq(hwloc_set_cpubind(t, pu->cpuset, HWLOC_CPUBIND_THREAD), 0);
    hwloc_nodeset_t want = hwloc_bitmap_alloc();
    hwloc_cpuset_to_nodeset(t, pu->cpuset, want);
    kvc_mem_params_t p = { .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_TARGET | KVC_MEM_PARAM_POLICY,
                           .kind = KVC_MEM_NUMA,
                           .target = KVC_MEM_TARGET_LOCAL,
                           .policy = KVC_MEM_POLICY_PREFERRED };
    void *ptr;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, 2 * MiB, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(r.numa_requested, hwloc_bitmap_first(want));
    if (r.fallbacks & KVC_MEM_FALLBACK_BIND_REFUSED) {
        cr_assert_eq(r.numa_bound, -1);
    } else {
        cr_assert_eq(r.numa_bound, hwloc_bitmap_first(want));
        hwloc_nodeset_t set = hwloc_bitmap_alloc();
        cr_assert_eq(area_binding(t, ptr, r.mapped_size, set), HWLOC_MEMBIND_BIND);
        cr_assert(hwloc_bitmap_isequal(set, want));
        hwloc_bitmap_free(set);
    }
    assert_location_matches_hwloc(t, ptr, &r);
    /* The first-touch threads restored this thread's binding. */
    hwloc_cpuset_t now = hwloc_bitmap_alloc();
    cr_assert_eq(hwloc_get_cpubind(t, now, HWLOC_CPUBIND_THREAD), 0);
    cr_assert(hwloc_bitmap_isequal(now, pu->cpuset));
    hwloc_bitmap_free(now);
    hwloc_bitmap_free(want);
    kvc_mem_free(ctx, ptr);
    hwloc_topology_destroy(t);
    kvc_context_destroy(ctx);
}

/* ---------------------------------------------------------------- placement policies */

Test(memory, strict_missing_node_fails_preferred_falls_back)
{
    kvc_context_t *ctx = real_ctx();
    const unsigned missing = (unsigned)kvc_topology_numa_count(ctx) + 997;
    kvc_mem_params_t p = node_params(0, missing, KVC_MEM_POLICY_STRICT);
    void *ptr = (void *)0x1;
    cr_assert_eq(kvc_mem_alloc(ctx, MiB, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "does not exist"), "%s", kvc_last_error());
    cr_assert_eq(ptr, (void *)0x1);
    cr_assert_eq(kvc_mem_live_count(ctx), 0);

    p.policy = KVC_MEM_POLICY_PREFERRED;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, MiB, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(r.fallbacks, KVC_MEM_FALLBACK_NO_SUCH_NODE);
    cr_assert(strstr(r.fallback_text, "does not exist"), "%s", r.fallback_text);
    cr_assert_eq(r.numa_requested, (int)missing);
    cr_assert_eq(r.numa_bound, -1);
    cr_assert_not(r.kind_obtained & KVC_MEM_NUMA);
    cr_assert_eq(r.kind_requested, KVC_MEM_NUMA);
    hwloc_topology_t t = real_topology();
    assert_location_matches_hwloc(t, ptr, &r);
    hwloc_nodeset_t set = hwloc_bitmap_alloc();
    cr_assert_neq(area_binding(t, ptr, r.mapped_size, set), HWLOC_MEMBIND_BIND, "a fallback must not be bound");
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    kvc_context_destroy(ctx);
}

Test(memory, strict_binding_larger_than_the_node_fails_before_mapping)
{
    kvc_context_t *ctx = real_ctx();
    kvc_numa_node_info_t n;
    cr_assert_eq(kvc_topology_numa_node(ctx, 0, &n), KVC_OK);
    kvc_mem_params_t p = node_params(0, n.os_index, KVC_MEM_POLICY_STRICT);
    p.field_mask |= KVC_MEM_PARAM_TOUCH;
    p.touch = 0;
    void *ptr = (void *)0x1;
    cr_assert_eq(kvc_mem_alloc(ctx, n.total_bytes + GiB, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "bytes in all"), "%s", kvc_last_error());
    cr_assert_eq(ptr, (void *)0x1);
    /* Preferred (MPOL_PREFERRED) may spill to other nodes: no such limit (not touched here; the
     * kernel's overcommit check may still refuse a mapping larger than the machine). */
    p.policy = KVC_MEM_POLICY_PREFERRED;
    const kvc_status_t st = kvc_mem_alloc(ctx, n.total_bytes + GiB, &p, &ptr, NULL);
    cr_assert(st == KVC_OK || st == KVC_ERR_NO_MEMORY, "%s: %s", kvc_status_name(st), kvc_last_error());
    if (st == KVC_OK) cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    kvc_context_destroy(ctx);
}

Test(memory, xml_topology_binding_is_not_real)
{
    kvc_context_t *ctx = xml_ctx(kvc_test_data(TOPO_8NODES));
    cr_assert_eq(kvc_topology_numa_count(ctx), 8);
    kvc_numa_node_info_t info;
    cr_assert_eq(kvc_topology_numa_node(ctx, 3, &info), KVC_OK);
    const unsigned node = info.os_index;
    cr_assert_eq(info.free_bytes, -1, "free memory of an XML machine is unknown");

    kvc_mem_params_t p = node_params(0, node, KVC_MEM_POLICY_STRICT);
    void *ptr;
    cr_assert_eq(kvc_mem_alloc(ctx, MiB, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "XML"), "%s", kvc_last_error());
    p.node = 4242;
    cr_assert_eq(kvc_mem_alloc(ctx, MiB, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "4242 does not exist"), "%s", kvc_last_error());

    p = node_params(KVC_MEM_PINNED, node, KVC_MEM_POLICY_PREFERRED);
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, MiB, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(r.fallbacks, KVC_MEM_FALLBACK_NOT_THIS_SYSTEM);
    cr_assert(strstr(r.fallback_text, "XML"), "%s", r.fallback_text);
    cr_assert_eq(r.numa_requested, (int)node);
    cr_assert_eq(r.numa_bound, -1);
    cr_assert_eq(r.kind_obtained, KVC_MEM_PINNED, "pinned, but not claimed bound");
    cr_assert_eq(r.location_known, 0, "hwloc cannot locate pages of an XML machine");
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    kvc_context_destroy(ctx);
}

/* Node OS indexes past 63: an 80-node machine generated with hwloc and loaded from XML. */
Test(memory, node_indexes_beyond_63)
{
    char path[] = "/tmp/kvc-test-80nodes-XXXXXX";
    const int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    cr_assert_eq(hwloc_topology_set_synthetic(t, "pack:2 numa:40 core:1 pu:1"), 0);
    cr_assert_eq(hwloc_topology_load(t), 0);
    cr_assert_eq(hwloc_topology_export_xml(t, path, 0), 0);
    hwloc_topology_destroy(t);

    kvc_context_t *ctx = xml_ctx(path);
    cr_assert_eq(kvc_topology_numa_count(ctx), 80);
    kvc_mem_params_t p = node_params(0, 70, KVC_MEM_POLICY_PREFERRED);
    void *ptr;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(r.numa_requested, 70);
    cr_assert_eq(r.fallbacks, KVC_MEM_FALLBACK_NOT_THIS_SYSTEM, "node 70 exists: %s", r.fallback_text);
    kvc_mem_free(ctx, ptr);
    p.node = 80;
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, &r), KVC_OK);
    cr_assert_eq(r.fallbacks, KVC_MEM_FALLBACK_NO_SUCH_NODE, "%s", r.fallback_text);
    cr_assert(strstr(r.fallback_text, "0-79"), "%s", r.fallback_text);
    kvc_mem_free(ctx, ptr);
    p.policy = KVC_MEM_POLICY_STRICT;
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "80 does not exist"), "%s", kvc_last_error());
    p.node = 64;
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "XML"), "node 64 exists: %s", kvc_last_error());
    kvc_context_destroy(ctx);
    unlink(path);
}

/* "Near the GPU with PCI bus id X" resolves through the PCI tree: on the DGX-2 the GPUs of each
 * node are found by bus id, whatever their ordinal. */
Test(memory, pci_target_resolves_by_bus_id)
{
    kvc_context_t *ctx = xml_ctx(kvc_test_data(TOPO_DGX2));
    int checked = 0;
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        cr_assert_eq(kvc_topology_gpu(ctx, i, &g), KVC_OK);
        kvc_mem_params_t p = node_params(0, 0, KVC_MEM_POLICY_PREFERRED);
        p.target = KVC_MEM_TARGET_PCI;
        p.pci_bus_id = g.bus_id;
        void *ptr;
        kvc_mem_report_t r;
        cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(r.numa_requested, g.numa_node, "%s", g.bus_id);
        cr_assert_eq(r.fallbacks, KVC_MEM_FALLBACK_NOT_THIS_SYSTEM);
        kvc_mem_free(ctx, ptr);
        checked++;
    }
    cr_assert_eq(checked, 16);
    kvc_mem_params_t p = node_params(0, 0, KVC_MEM_POLICY_STRICT);
    p.target = KVC_MEM_TARGET_PCI;
    p.pci_bus_id = "0000:ff:1f.7";
    void *ptr;
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, NULL), KVC_ERR_PLACEMENT);
    cr_assert(strstr(kvc_last_error(), "0000:ff:1f.7"), "%s", kvc_last_error());
    p.policy = KVC_MEM_POLICY_PREFERRED;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, &r), KVC_OK);
    cr_assert_eq(r.fallbacks, KVC_MEM_FALLBACK_NO_SUCH_NODE);
    cr_assert_eq(r.numa_requested, -1);
    kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
}

/* On the real machine, binding near a PCI device really binds (any PCI device hwloc knows). */
Test(memory, pci_target_binds_on_this_machine)
{
    hwloc_topology_t t = real_topology();
    hwloc_obj_t dev = hwloc_get_next_pcidev(t, NULL);
    if (!dev) {
        hwloc_topology_destroy(t);
        cr_skip_test("hwloc sees no PCI device on this machine");
    }
    char bus[16];
    snprintf(bus, sizeof(bus), "%04x:%02x:%02x.%01x", dev->attr->pcidev.domain, dev->attr->pcidev.bus,
             dev->attr->pcidev.dev, dev->attr->pcidev.func);
    const hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, dev);
    const int want = hwloc_bitmap_first(anc->nodeset);
    kvc_context_t *ctx = real_ctx();
    kvc_mem_params_t p = node_params(0, 0, KVC_MEM_POLICY_PREFERRED);
    p.target = KVC_MEM_TARGET_PCI;
    p.pci_bus_id = bus;
    void *ptr;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, MiB, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(r.numa_requested, want, "%s", bus);
    if (!(r.fallbacks & KVC_MEM_FALLBACK_BIND_REFUSED)) cr_assert_eq(r.numa_bound, want);
    kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
    hwloc_topology_destroy(t);
}

/* Make system call `nr` fail with EPERM in this process, as a container's seccomp profile does
 * (Docker's refuses mbind without CAP_SYS_NICE). 0 on success. */
static int deny_syscall(long nr)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static int child_binding_refused(void *arg)
{
    (void)arg;
    if (deny_syscall(SYS_mbind) != 0) return CHILD_SKIP;
    kvc_context_t *ctx = child_ctx();
    if (!ctx) return 2;
    kvc_numa_node_info_t n;
    if (kvc_topology_numa_node(ctx, 0, &n) != KVC_OK) return 3;
    kvc_mem_params_t p = node_params(0, n.os_index, KVC_MEM_POLICY_STRICT);
    void *ptr = (void *)0x1;
    if (kvc_mem_alloc(ctx, MiB, &p, &ptr, NULL) != KVC_ERR_PLACEMENT) return 4;
    if (!strstr(kvc_last_error(), "refused") || !strstr(kvc_last_error(), strerror(EPERM))) {
        fprintf(stderr, "message: %s\n", kvc_last_error());
        return 5;
    }
    if (ptr != (void *)0x1 || kvc_mem_live_count(ctx) != 0) return 6;
    /* Shared memory: the half-made segment is removed. */
    const char *name = shm_name("refused");
    p.field_mask |= KVC_MEM_PARAM_NAME;
    p.kind |= KVC_MEM_SHARED;
    p.name = name;
    if (kvc_mem_alloc(ctx, MiB, &p, &ptr, NULL) != KVC_ERR_PLACEMENT || shm_exists(name)) return 7;
    /* Preferred: unbound memory, and the report says why. */
    p = node_params(KVC_MEM_PINNED, n.os_index, KVC_MEM_POLICY_PREFERRED);
    kvc_mem_report_t r;
    if (kvc_mem_alloc(ctx, MiB, &p, &ptr, &r) != KVC_OK) return 8;
    if (r.fallbacks != KVC_MEM_FALLBACK_BIND_REFUSED || r.numa_bound != -1 || r.numa_requested != (int)n.os_index)
        return 9;
    if (r.kind_obtained != KVC_MEM_PINNED || !strstr(r.fallback_text, "CAP_SYS_NICE")) return 10;
    kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
    return 0;
}

Test(memory, binding_refused_by_the_os)
{
    const int rc = run_child(child_binding_refused, NULL);
    if (rc == CHILD_SKIP) cr_skip_test("cannot install a seccomp filter here");
    cr_assert_eq(rc, 0, "child check %d failed", rc);
}

static int child_touch_unbound(void *arg)
{
    (void)arg;
    if (deny_syscall(SYS_sched_setaffinity) != 0) return CHILD_SKIP;
    kvc_context_t *ctx = child_ctx();
    if (!ctx) return 2;
    kvc_numa_node_info_t n;
    if (kvc_topology_numa_node(ctx, 0, &n) != KVC_OK) return 3;
    if (n.num_cpus == 0) return CHILD_SKIP;
    kvc_mem_params_t p = node_params(0, n.os_index, KVC_MEM_POLICY_STRICT);
    void *ptr;
    kvc_mem_report_t r;
    if (kvc_mem_alloc(ctx, MiB, &p, &ptr, &r) != KVC_OK) return 4;
    /* The threads could not move to the node's CPUs; the binding still placed every page. */
    if (r.fallbacks != KVC_MEM_FALLBACK_TOUCH_UNBOUND || r.numa_bound != (int)n.os_index) return 5;
    if (r.location_count != 1 || r.location[0].os_index != n.os_index || r.pages_unplaced) return 6;
    kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
    return 0;
}

Test(memory, first_touch_threads_cannot_move)
{
    const int rc = run_child(child_touch_unbound, NULL);
    if (rc == CHILD_SKIP) cr_skip_test("cannot install a seccomp filter here, or node 0 has no CPUs");
    cr_assert_eq(rc, 0, "child check %d failed", rc);
}

/* ---------------------------------------------------------------- hugepages */

/* Free 2 MiB hugetlb pages according to /proc/meminfo (independent of the library). */
static long meminfo_free_2m_hugepages(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    cr_assert_not_null(f);
    char line[256];
    long free_pages = 0, resv = 0, size_kb = 0;
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "HugePages_Free: %ld", &free_pages);
        sscanf(line, "HugePages_Rsvd: %ld", &resv);
        sscanf(line, "Hugepagesize: %ld kB", &size_kb);
    }
    fclose(f);
    return size_kb == 2048 ? free_pages - resv : -1;
}

Test(memory, hugepages_unavailable_fall_back_or_fail)
{
    const long avail = meminfo_free_2m_hugepages();
    if (avail < 0) cr_skip_test("the default hugepage size is not 2 MiB");
    kvc_context_t *ctx = real_ctx();
    /* More 2 MiB pages than the pool has free: hugetlb cannot serve it. */
    const size_t size = (size_t)(avail + 1) * 2 * MiB;
    kvc_mem_params_t p = kind_params(KVC_MEM_HUGEPAGE);
    p.field_mask |= KVC_MEM_PARAM_POLICY;
    p.policy = KVC_MEM_POLICY_STRICT;
    void *ptr = (void *)0x1;
    cr_assert_eq(kvc_mem_alloc(ctx, size, &p, &ptr, NULL), KVC_ERR_LIMIT);
    cr_assert(strstr(kvc_last_error(), "hugetlb"), "%s", kvc_last_error());
    cr_assert_eq(ptr, (void *)0x1);

    p.policy = KVC_MEM_POLICY_PREFERRED;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, size, &p, &ptr, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert(r.fallbacks & KVC_MEM_FALLBACK_NO_HUGETLB, "%s", r.fallback_text);
    cr_assert_neq(r.pages_kind, KVC_MEM_PAGES_HUGETLB);
    cr_assert_eq(r.page_size, (size_t)sysconf(_SC_PAGESIZE), "never claim a page size not obtained");
    const kvc_thp_mode_t thp = kvc_thp_mode();
    if (thp == KVC_THP_MADVISE || thp == KVC_THP_ALWAYS) {
        cr_assert_eq(r.pages_kind, KVC_MEM_PAGES_THP);
        cr_assert(r.kind_obtained & KVC_MEM_HUGEPAGE);
        cr_assert_eq((uintptr_t)ptr % (2 * MiB), 0, "THP ranges are 2 MiB aligned");
        cr_assert_eq(r.huge_bytes, smaps_field(ptr, "AnonHugePages"));
    } else {
        cr_assert(r.fallbacks & KVC_MEM_FALLBACK_NO_THP);
        cr_assert_eq(r.pages_kind, KVC_MEM_PAGES_NORMAL);
        cr_assert_not(r.kind_obtained & KVC_MEM_HUGEPAGE);
    }
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    kvc_context_destroy(ctx);
}

/* ---------------------------------------------------------------- pinning */

Test(memory, pinned_in_chunks)
{
    kvc_context_t *ctx = real_ctx();
    kvc_mem_params_t p = kind_params(KVC_MEM_PINNED);
    p.field_mask |= KVC_MEM_PARAM_PIN_CHUNK;
    p.pin_chunk = MiB;
    const uint64_t before = status_kb_field("VmLck");
    void *ptr;
    kvc_mem_report_t r;
    kvc_status_t st = kvc_mem_alloc(ctx, 3 * MiB + 1, &p, &ptr, &r);
    if (st == KVC_ERR_LIMIT) cr_skip_test("RLIMIT_MEMLOCK too low here: %s", kvc_last_error());
    cr_assert_eq(st, KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(r.pin_calls, 4, "3 MiB + 1 byte in 1 MiB chunks");
    cr_assert(r.pinned);
    cr_assert_geq(status_kb_field("VmLck") - before, r.mapped_size);
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    cr_assert_eq(status_kb_field("VmLck"), before);
    kvc_context_destroy(ctx);
}

/* Take CAP_IPC_LOCK away (root ignores RLIMIT_MEMLOCK with it); 0 on success. */
static int drop_cap_ipc_lock(void)
{
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        const uint32_t bit = i == CAP_IPC_LOCK / 32 ? 1u << (CAP_IPC_LOCK % 32) : 0;
        d[i].effective &= ~bit;
        d[i].permitted &= ~bit;
        d[i].inheritable &= ~bit;
    }
    return (int)syscall(SYS_capset, &h, d);
}

static int child_mlock_limit(void *arg)
{
    (void)arg;
    if (drop_cap_ipc_lock() != 0) return CHILD_SKIP;
    const struct rlimit rl = { 64 * KiB, 64 * KiB };
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) return CHILD_SKIP;
    kvc_context_t *ctx = child_ctx();
    if (!ctx) return 2;
    void *ptr = (void *)0x1;
    kvc_mem_params_t p = kind_params(KVC_MEM_PINNED);
    if (kvc_mem_alloc(ctx, 4 * MiB, &p, &ptr, NULL) != KVC_ERR_LIMIT) return 3;
    if (!strstr(kvc_last_error(), "RLIMIT_MEMLOCK allows 65536 bytes")) {
        fprintf(stderr, "message: %s\n", kvc_last_error());
        return 4;
    }
    if (!strstr(kvc_last_error(), "4194304 bytes")) return 5; /* says how much was asked */
    if (ptr != (void *)0x1 || kvc_mem_live_count(ctx) != 0) return 6;
    /* In 32 KiB chunks the first chunk fits, the third does not: all of it is rolled back. */
    p.field_mask |= KVC_MEM_PARAM_PIN_CHUNK;
    p.pin_chunk = 32 * KiB;
    if (kvc_mem_alloc(ctx, 256 * KiB, &p, &ptr, NULL) != KVC_ERR_LIMIT) return 7;
    if (!strstr(kvc_last_error(), "released")) return 8;
    if (status_kb_field("VmLck") != 0) return 9;
    /* Within the limit it works and is really locked. */
    kvc_mem_report_t r;
    if (kvc_mem_alloc(ctx, 32 * KiB, &p, &ptr, &r) != KVC_OK || !r.pinned) return 10;
    if (status_kb_field("VmLck") != 32 * KiB) return 11;
    kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
    return 0;
}

Test(memory, mlock_limit_too_low_is_a_limit_error)
{
    const int rc = run_child(child_mlock_limit, NULL);
    if (rc == CHILD_SKIP) cr_skip_test("cannot drop CAP_IPC_LOCK or set RLIMIT_MEMLOCK here");
    cr_assert_eq(rc, 0, "child check %d failed", rc);
}

/* On a GPU-type backend pinning goes through the module's host_register slot; a module without
 * one fails the request (never an unpinned "pinned" pool), and copies say unsupported. */
Test(memory, backend_without_host_register)
{
    setenv("HWLOC_XMLFILE", kvc_test_data("topologies/24em64t-2n6c2t-pci.xml"), 1);
    setenv("KVCORE_MODULE_PATH", kvc_test_module_dir(kvc_test_build("tests/modules/.libs/fake_good.so"), "kvcore_cuda.so"), 1);
    setenv("KVC_FAKE_NDEV", "1", 1);
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK, "%s", kvc_last_error());
    cr_assert_str_neq(kvc_context_backend_name(ctx), "cpu");
    kvc_mem_params_t p = kind_params(KVC_MEM_PINNED);
    void *ptr = (void *)0x1;
    cr_assert_eq(kvc_mem_alloc(ctx, 3 * MiB, &p, &ptr, NULL), KVC_ERR_UNSUPPORTED);
    cr_assert(strstr(kvc_last_error(), "chunk 1 of 1"), "%s", kvc_last_error());
    cr_assert_eq(ptr, (void *)0x1);
    cr_assert_eq(kvc_mem_live_count(ctx), 0);
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_alloc(ctx, 3 * MiB, NULL, &ptr, &r), KVC_OK, "plain memory needs no backend op");
    char a[8] = "abcdefg", b[8];
    cr_assert_eq(kvc_memcpy_async(ctx, b, a, 8, KVC_D2H, 0, 64, NULL), KVC_ERR_UNSUPPORTED);
    /* nor can a device file be registered as I/O memory (no host_register_io slot) */
    char path[] = "/tmp/kvc-bar-nomod.XXXXXX";
    const int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    close(fd);
    cr_assert_eq(kvc_mem_map_file(ctx, path, 4096, 0, KVC_MEM_PINNED, &ptr, NULL), KVC_ERR_UNSUPPORTED);
    cr_assert(strstr(kvc_last_error(), "I/O memory"), "%s", kvc_last_error());
    unlink(path);
    kvc_context_destroy(ctx); /* frees the leaked plain allocation */
}

/* ---------------------------------------------------------------- shared memory */

typedef struct {
    const char *name;
    size_t size;
} shm_job_t;

static int child_reads_and_replies(void *arg)
{
    const shm_job_t *j = arg;
    kvc_context_t *ctx = child_ctx();
    if (!ctx) return 2;
    void *p;
    size_t size = 0;
    kvc_mem_report_t r;
    if (kvc_mem_attach(ctx, j->name, KVC_MEM_SHARED, &p, &size, &r) != KVC_OK) return 3;
    if (size != j->size || !r.attached || r.kind_obtained != KVC_MEM_SHARED) return 4;
    unsigned char *want = malloc(size);
    fill_pattern(want, size, 9);
    const int same = !memcmp(p, want, size);
    free(want);
    if (!same) return 5;
    ((unsigned char *)p)[size - 1] = 0x5c; /* the reply */
    if (kvc_mem_free(ctx, p) != KVC_OK) return 6; /* detach: must not unlink */
    if (!shm_exists(j->name)) return 7;
    kvc_context_destroy(ctx);
    return 0;
}

Test(memory, shared_seen_by_forked_child)
{
    kvc_context_t *ctx = real_ctx();
    shm_job_t j = { shm_name("fork"), MiB + 3 };
    kvc_mem_params_t p = shm_params(0, j.name);
    void *ptr;
    cr_assert_eq(kvc_mem_alloc(ctx, j.size, &p, &ptr, NULL), KVC_OK, "%s", kvc_last_error());
    fill_pattern(ptr, j.size, 9);
    cr_assert_eq(run_child(child_reads_and_replies, &j), 0);
    cr_assert_eq(((unsigned char *)ptr)[j.size - 1], 0x5c, "the child's write is visible");
    /* Attach in this process too: a second view of the same bytes. */
    void *view;
    size_t size;
    cr_assert_eq(kvc_mem_attach(ctx, j.name, 0, &view, &size, NULL), KVC_OK);
    cr_assert_neq(view, ptr);
    cr_assert_eq(size, j.size);
    ((unsigned char *)view)[0] = 0xee;
    cr_assert_eq(((unsigned char *)ptr)[0], 0xee);
    cr_assert_eq(kvc_mem_live_count(ctx), 2);
    cr_assert_eq(kvc_mem_free(ctx, view), KVC_OK);
    cr_assert(shm_exists(j.name), "detaching never unlinks");
    /* 0600: nobody else can open it. */
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm%s", j.name);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    cr_assert_not(shm_exists(j.name), "the creator unlinks on free");
    cr_assert_eq(kvc_mem_attach(ctx, j.name, 0, &view, &size, NULL), KVC_ERR_NOT_FOUND);
    kvc_context_destroy(ctx);
}

static int child_frees_inherited_creation(void *arg)
{
    /* The registry is inherited across fork: freeing the parent's creation in the child unmaps the
     * child's copy but leaves the name, which belongs to the creating process. */
    kvc_context_t *ctx = arg;
    void *p;
    kvc_mem_info_t info;
    if (kvc_mem_live_get(ctx, 0, &info) != KVC_OK) return 2;
    p = info.ptr;
    if (kvc_mem_free(ctx, p) != KVC_OK) return 3;
    return shm_exists(info.name) ? 0 : 4;
}

Test(memory, only_the_creating_process_unlinks)
{
    kvc_context_t *ctx = real_ctx();
    const char *name = shm_name("owner");
    kvc_mem_params_t p = shm_params(0, name);
    void *ptr;
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &p, &ptr, NULL), KVC_OK);
    cr_assert_eq(run_child(child_frees_inherited_creation, ctx), 0);
    cr_assert(shm_exists(name));
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    cr_assert_not(shm_exists(name));
    kvc_context_destroy(ctx);
}

Test(memory, shared_exclusive_create_never_reuses)
{
    kvc_context_t *ctx = real_ctx();
    const char *name = shm_name("excl");
    kvc_mem_params_t p = shm_params(0, name);
    void *a, *b = (void *)0x1;
    cr_assert_eq(kvc_mem_alloc(ctx, 8192, &p, &a, NULL), KVC_OK);
    cr_assert_eq(kvc_mem_alloc(ctx, 8192, &p, &b, NULL), KVC_ERR_EXISTS);
    cr_assert_eq(b, (void *)0x1);
    cr_assert_eq(kvc_mem_free(ctx, a), KVC_OK);

    /* A stale segment (a crashed process's) is reported, and left exactly as it was. */
    const int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    cr_assert_eq(pwrite(fd, "stale", 5, 0), 5);
    cr_assert_eq(kvc_mem_alloc(ctx, 1 << 20, &p, &b, NULL), KVC_ERR_EXISTS);
    cr_assert(strstr(kvc_last_error(), "not a kvcore segment"), "%s", kvc_last_error());
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_size, 4096, "the stale segment was not resized");
    char buf[6] = { 0 };
    cr_assert_eq(pread(fd, buf, 5, 0), 5);
    cr_assert_str_eq(buf, "stale");
    close(fd);
    shm_unlink(name);
    kvc_context_destroy(ctx);
}

/* A creator SIGKILLed while holding its segment: the segment stays (attachable, its data intact),
 * a plain create of the name says it is abandoned, a create with reclaim replaces it; a live
 * creator's segment is never reclaimed. */
Test(memory, shared_reclaim_after_killed_creator)
{
    const char *name = shm_name("reclaim");
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    fflush(NULL);
    const pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        kvc_context_t *c = real_ctx();
        kvc_mem_params_t p = shm_params(0, name);
        void *a;
        if (kvc_mem_alloc(c, 64 * KiB, &p, &a, NULL) != KVC_OK) _exit(1);
        memcpy(a, "left behind", 12);
        if (write(ready[1], "r", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char r;
    cr_assert_eq(read(ready[0], &r, 1), 1, "the creator failed");
    /* Alive: neither a plain create nor a reclaim may take the name. */
    kvc_context_t *ctx = real_ctx();
    kvc_mem_params_t p = shm_params(0, name), rp = p;
    rp.field_mask |= KVC_MEM_PARAM_RECLAIM;
    rp.reclaim = 1;
    void *a = (void *)0x1, *b;
    size_t size;
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &rp, &a, NULL), KVC_ERR_EXISTS);
    cr_assert(strstr(kvc_last_error(), "alive"), "%s", kvc_last_error());
    cr_assert_eq(a, (void *)0x1);
    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    cr_assert(shm_exists(name), "a killed creator leaves its segment");
    cr_assert_eq(kvc_mem_attach(ctx, name, 0, &b, &size, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_str_eq(b, "left behind");
    cr_assert_eq(kvc_mem_free(ctx, b), KVC_OK);
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &p, &a, NULL), KVC_ERR_EXISTS);
    cr_assert(strstr(kvc_last_error(), "abandoned"), "%s", kvc_last_error());
    cr_assert_eq(kvc_mem_alloc(ctx, 128 * KiB, &rp, &a, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(((char *)a)[0], 0, "a fresh segment, not the old one");
    cr_assert_eq(kvc_mem_attach(ctx, name, 0, &b, &size, NULL), KVC_OK);
    cr_assert_eq(size, 128 * KiB);
    cr_assert_eq(kvc_mem_free(ctx, b), KVC_OK);
    /* reclaim without KVC_MEM_SHARED is a usage error. */
    kvc_mem_params_t bad = { .field_mask = KVC_MEM_PARAM_RECLAIM, .reclaim = 1 };
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &bad, &b, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_free(ctx, a), KVC_OK);
    cr_assert_not(shm_exists(name));
    close(ready[0]);
    close(ready[1]);
    kvc_context_destroy(ctx);
}

/* Reclaim removes only a segment proven to be kvcore's (its owner record names this very file):
 * another program's file of that name, unlocked, is KVC_ERR_EXISTS and left exactly as it was,
 * whether no kvcore segment ever had the name or a dead kvcore creator's segment was replaced. */
static void assert_untouched(int fd, const char *what)
{
    struct stat st;
    char buf[8] = { 0 };
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_gt(st.st_nlink, 0, "%s: unlinked", what);
    cr_assert_eq(st.st_size, 4096, "%s: resized", what);
    cr_assert_eq(pread(fd, buf, 7, 0), 7);
    cr_assert_str_eq(buf, "foreign", "%s: overwritten", what);
}

static int foreign_segment(const char *name)
{
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    cr_assert_eq(pwrite(fd, "foreign", 7, 0), 7);
    return fd;
}

Test(memory, reclaim_never_removes_another_programs_segment)
{
    kvc_context_t *ctx = real_ctx();
    const char *name = shm_name("foreign");
    kvc_mem_params_t rp = shm_params(0, name);
    rp.field_mask |= KVC_MEM_PARAM_RECLAIM;
    rp.reclaim = 1;
    void *a = (void *)0x1;
    /* Never kvcore's. */
    int fd = foreign_segment(name);
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &rp, &a, NULL), KVC_ERR_EXISTS);
    cr_assert(strstr(kvc_last_error(), "not a kvcore segment"), "%s", kvc_last_error());
    cr_assert_eq(a, (void *)0x1);
    assert_untouched(fd, "never kvcore's");
    close(fd);
    shm_unlink(name);
    /* kvcore's once, freed; then another program's. */
    kvc_mem_params_t p = shm_params(0, name);
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &p, &a, NULL), KVC_OK);
    cr_assert_eq(kvc_mem_free(ctx, a), KVC_OK);
    a = (void *)0x1;
    fd = foreign_segment(name);
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &rp, &a, NULL), KVC_ERR_EXISTS);
    assert_untouched(fd, "after a freed kvcore segment");
    close(fd);
    shm_unlink(name);
    /* A kvcore creator killed (its owner record left behind), its segment removed and the name
     * taken by another program: the record names another file, so nothing is proven. */
    fflush(NULL);
    const pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        kvc_context_t *c = real_ctx();
        void *x;
        _exit(kvc_mem_alloc(c, 64 * KiB, &p, &x, NULL) == KVC_OK ? 9 : 1);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 9, "the creator failed");
    cr_assert(shm_exists(name), "an exiting creator that did not free leaves its segment");
    cr_assert_eq(shm_unlink(name), 0);
    fd = foreign_segment(name);
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &rp, &a, NULL), KVC_ERR_EXISTS);
    cr_assert(strstr(kvc_last_error(), "not a kvcore segment"), "%s", kvc_last_error());
    assert_untouched(fd, "a foreign file under a dead creator's name");
    close(fd);
    shm_unlink(name);
    /* Now free: the stale owner record does not stop a fresh create. */
    cr_assert_eq(kvc_mem_alloc(ctx, 64 * KiB, &p, &a, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_mem_free(ctx, a), KVC_OK);
    cr_assert_not(shm_exists(name));
    kvc_context_destroy(ctx);
}

Test(memory, shared_names_are_validated)
{
    kvc_context_t *ctx = real_ctx();
    char long_name[KVC_MEM_SHM_NAME_MAX + 2], max_name[KVC_MEM_SHM_NAME_MAX + 1];
    char ctrl[] = "/kvc\ttab", high[] = "/kvc\xc3\xa9";
    memset(long_name, 'a', sizeof(long_name));
    long_name[0] = '/';
    long_name[KVC_MEM_SHM_NAME_MAX + 1] = '\0'; /* one character too many */
    const char *bad[] = { "", "noslash", "/", "/a/b", "/.", "/..", long_name, ctrl, high, "//x" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kvc_mem_params_t p = shm_params(0, bad[i]);
        void *ptr = (void *)0x1;
        cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, NULL), KVC_ERR_INVALID_ARG, "name #%zu '%s'", i, bad[i]);
        cr_assert_eq(ptr, (void *)0x1);
        size_t size;
        cr_assert_eq(kvc_mem_attach(ctx, bad[i], 0, &ptr, &size, NULL), KVC_ERR_INVALID_ARG, "attach #%zu", i);
    }
    void *ptr;
    size_t size;
    cr_assert_eq(kvc_mem_attach(ctx, NULL, 0, &ptr, &size, NULL), KVC_ERR_INVALID_ARG);
    /* The longest name allowed works with shm_open. */
    snprintf(max_name, sizeof(max_name), "/kvc-test-%d-", (int)getpid());
    size_t n = strlen(max_name);
    memset(max_name + n, 'm', KVC_MEM_SHM_NAME_MAX - n);
    max_name[KVC_MEM_SHM_NAME_MAX] = '\0';
    kvc_mem_params_t p = shm_params(0, max_name);
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, &p, &ptr, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_mem_free(ctx, ptr), KVC_OK);
    kvc_context_destroy(ctx);
}

Test(memory, attach_errors)
{
    kvc_context_t *ctx = real_ctx();
    void *ptr = (void *)0x1;
    size_t size = 0;
    const char *name = shm_name("attach");
    cr_assert_eq(kvc_mem_attach(ctx, name, 0, &ptr, &size, NULL), KVC_ERR_NOT_FOUND);
    cr_assert_eq(kvc_mem_attach(ctx, name, KVC_MEM_HUGEPAGE, &ptr, &size, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_attach(ctx, name, KVC_MEM_NUMA | KVC_MEM_SHARED, &ptr, &size, NULL), KVC_ERR_INVALID_ARG);
    /* A segment of size 0 whose creator holds the owner lock is still being created: retry. The
     * same segment without a lock holder was abandoned (its creator died while reserving): not
     * found, and never "retry" forever. */
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    cr_assert_eq(kvc_mem_attach(ctx, name, 0, &ptr, &size, NULL), KVC_ERR_STATE);
    cr_assert(strstr(kvc_last_error(), "being created"), "%s", kvc_last_error());
    cr_assert_eq(ptr, (void *)0x1);
    cr_assert_eq(flock(fd, LOCK_UN), 0);
    cr_assert_eq(kvc_mem_attach(ctx, name, 0, &ptr, &size, NULL), KVC_ERR_NOT_FOUND);
    cr_assert(strstr(kvc_last_error(), "nobody owns"), "%s", kvc_last_error());
    cr_assert_eq(ptr, (void *)0x1);
    close(fd);
    shm_unlink(name);
    cr_assert_eq(kvc_mem_live_count(ctx), 0);
    kvc_context_destroy(ctx);
}

Test(memory, attach_pinned)
{
    kvc_context_t *ctx = real_ctx();
    const char *name = shm_name("attpin");
    kvc_mem_params_t p = shm_params(0, name);
    void *a, *b;
    cr_assert_eq(kvc_mem_alloc(ctx, 256 * KiB, &p, &a, NULL), KVC_OK);
    const uint64_t before = status_kb_field("VmLck");
    kvc_mem_report_t r;
    kvc_status_t st = kvc_mem_attach(ctx, name, KVC_MEM_SHARED | KVC_MEM_PINNED, &b, NULL, &r);
    if (st == KVC_ERR_LIMIT) cr_skip_test("RLIMIT_MEMLOCK too low here");
    cr_assert_eq(st, KVC_OK, "%s", kvc_last_error());
    cr_assert(r.pinned && r.attached);
    cr_assert_eq(r.kind_obtained, KVC_MEM_SHARED | KVC_MEM_PINNED);
    cr_assert_geq(status_kb_field("VmLck") - before, 256 * KiB);
    cr_assert_eq(kvc_mem_free(ctx, b), KVC_OK);
    cr_assert_eq(status_kb_field("VmLck"), before);
    cr_assert_eq(kvc_mem_free(ctx, a), KVC_OK);
    kvc_context_destroy(ctx);
}

static int child_small_tmpfs(void *arg)
{
    (void)arg;
    if (unshare(CLONE_NEWNS) != 0) return CHILD_SKIP;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return CHILD_SKIP;
    if (mount("kvc-test", "/dev/shm", "tmpfs", 0, "size=1m") != 0) return CHILD_SKIP;
    kvc_context_t *ctx = child_ctx();
    if (!ctx) return 2;
    const char *name = shm_name("small");
    kvc_mem_params_t p = shm_params(0, name);
    void *ptr = (void *)0x1;
    /* 4 MiB in a 1 MiB tmpfs: refused now, never a SIGBUS at first touch. */
    if (kvc_mem_alloc(ctx, 4 * MiB, &p, &ptr, NULL) != KVC_ERR_NO_SPACE) return 3;
    if (!strstr(kvc_last_error(), "4194304 bytes requested")) {
        fprintf(stderr, "message: %s\n", kvc_last_error());
        return 4;
    }
    if (ptr != (void *)0x1 || shm_exists(name) || kvc_mem_live_count(ctx) != 0) return 5;
    /* What fits, works, and can be written to the end. */
    if (kvc_mem_alloc(ctx, 512 * KiB, &p, &ptr, NULL) != KVC_OK) return 6;
    memset(ptr, 1, 512 * KiB);
    /* The space is reserved: a second 768 KiB segment no longer fits in the rest. */
    kvc_mem_params_t q = shm_params(0, shm_name("small2"));
    void *other;
    if (kvc_mem_alloc(ctx, 768 * KiB, &q, &other, NULL) != KVC_ERR_NO_SPACE) return 7;
    kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
    return 0;
}

Test(memory, small_tmpfs_is_no_space_not_sigbus)
{
    if (geteuid() != 0) cr_skip_test("needs root to mount a small tmpfs over /dev/shm in a private namespace");
    const int rc = run_child(child_small_tmpfs, NULL);
    if (rc == CHILD_SKIP) cr_skip_test("unshare(CLONE_NEWNS) or mounting tmpfs was refused here");
    cr_assert_eq(rc, 0, "child check %d failed", rc);
}

/* ---------------------------------------------------------------- leak accounting */

Test(memory, live_allocations_and_leak_report_at_destroy)
{
    setenv("KVCORE_LOG_LEVEL", "warn", 1); /* read at the first context creation of this process */
    kvc_context_t *ctx = real_ctx();
    void *a, *b, *c;
    const char *name = shm_name("leak");
    kvc_mem_params_t sp = shm_params(0, name);
    cr_assert_eq(kvc_mem_alloc(ctx, 4096, NULL, &a, NULL), KVC_OK);
    cr_assert_eq(kvc_mem_alloc(ctx, 10000, NULL, &b, NULL), KVC_OK);
    cr_assert_eq(kvc_mem_alloc(ctx, 8192, &sp, &c, NULL), KVC_OK);
    cr_assert_eq(kvc_mem_free(ctx, b), KVC_OK);
    cr_assert_eq(kvc_mem_live_count(ctx), 2);
    kvc_mem_info_t info;
    cr_assert_eq(kvc_mem_live_get(ctx, 0, &info), KVC_OK);
    cr_assert_eq(info.ptr, c, "newest first");
    cr_assert_eq(info.size, 8192);
    cr_assert_eq(info.kind, KVC_MEM_SHARED);
    cr_assert_str_eq(info.name, name);
    cr_assert_eq(kvc_mem_live_get(ctx, 1, &info), KVC_OK);
    cr_assert_eq(info.ptr, a);
    cr_assert_eq(info.numa_node, -1);
    cr_assert_eq(kvc_mem_live_get(ctx, 2, &info), KVC_ERR_OUT_OF_RANGE);

    /* Destroy with both still live: each is logged (size, kind, where) and freed. */
    char path[] = "/tmp/kvc-test-leak-XXXXXX";
    const int log = mkstemp(path);
    cr_assert_geq(log, 0);
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    dup2(log, STDERR_FILENO);
    kvc_context_destroy(ctx);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char text[4096] = { 0 };
    cr_assert_gt(pread(log, text, sizeof(text) - 1, 0), 0);
    close(log);
    unlink(path);
    cr_assert(strstr(text, "leak: 4096 bytes (plain)"), "%s", text);
    cr_assert(strstr(text, "leak: 8192 bytes (shared)"), "%s", text);
    cr_assert(strstr(text, name), "%s", text);
    cr_assert_null(strstr(text, "10000 bytes"), "a freed allocation is not a leak: %s", text);
    cr_assert_not(shm_exists(name), "the leaked segment was freed and unlinked");
}

/* ---------------------------------------------------------------- split copy */

Test(memory, split_pieces_follow_the_spec)
{
    /* docs/LMCACHE.md cases plus unaligned offsets, large alignments and tiny copies. */
    const size_t cases[][3] = { { 0, 64, 64 },   { 32, 32, 64 },     { 32, 64, 64 },   { 0, 192, 64 },
                                { 64, 128, 64 }, { 16, 200, 64 },    { 0, 1, 1 },      { 5, 17, 1 },
                                { 7, 1000, 8 },  { 4095, 2, 4096 },  { 0, 4096, 4096 }, { 123, 100000, 65536 },
                                { (size_t)3 << 40, 5 << 20, 1 << 21 } };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const size_t off0 = cases[c][0], n = cases[c][1], align = cases[c][2];
        size_t roff[2048], rlen[2048];
        const size_t count = ref_split_pieces(n, off0, align, roff, rlen, 2048);
        cr_assert_leq(count, 2048);
        const struct kvc_copy_split a = { .nbytes = n, .host_offset = off0, .host_alignment = align };
        size_t k = 0, off = 0;
        while (off < n) {
            const size_t piece = kvc_copy_split_piece(&a, off);
            cr_assert_lt(k, count, "case %zu: more pieces than the spec", c);
            cr_assert_eq(off, roff[k], "case %zu piece %zu", c, k);
            cr_assert_eq(piece, rlen[k], "case %zu piece %zu", c, k);
            /* No piece crosses a multiple of the alignment in host offset space. */
            cr_assert_eq((off0 + off) / align, (off0 + off + piece - 1) / align);
            off += piece;
            k++;
        }
        cr_assert_eq(k, count, "case %zu", c);
    }
}

Test(memory, split_copy_equals_memcpy)
{
    kvc_context_t *ctx = real_ctx();
    /* docs/LMCACHE.md: 256-byte buffers, alignment 64, both directions. */
    const size_t cases[][2] = { { 0, 64 }, { 32, 32 }, { 32, 64 }, { 0, 192 }, { 64, 128 }, { 16, 200 } };
    unsigned char host[256], dev[256], want[256];
    for (int dir = 0; dir < 2; dir++)
        for (size_t c = 0; c < 6; c++) {
            const size_t off = cases[c][0], n = cases[c][1];
            fill_pattern(host, sizeof(host), 1);
            fill_pattern(dev, sizeof(dev), 77);
            unsigned char *src = dir == KVC_H2D ? host : dev, *dst = dir == KVC_H2D ? dev : host;
            memcpy(want, dst, sizeof(want));
            memcpy(want + off, src + off, n);
            cr_assert_eq(kvc_memcpy_async(ctx, dst + off, src + off, n, (kvc_direction_t)dir, off, 64, NULL),
                         KVC_OK, "%s", kvc_last_error());
            cr_assert_arr_eq(dst, want, sizeof(want), "dir %d case (%zu, %zu)", dir, off, n);
        }
    /* Large and unaligned: spread over threads, still byte-exact. */
    const size_t big = 8 * MiB + 12345;
    unsigned char *s = malloc(big), *d = calloc(1, big + 16), *w = calloc(1, big + 16);
    fill_pattern(s, big, 3);
    memcpy(w + 7, s, big);
    cr_assert_eq(kvc_memcpy_async(ctx, d + 7, s, big, KVC_D2H, 123, 4096, NULL), KVC_OK);
    cr_assert_arr_eq(d, w, big + 16);
    free(s);
    free(d);
    free(w);
    kvc_context_destroy(ctx);
}

Test(memory, split_copy_errors_write_nothing)
{
    kvc_context_t *ctx = real_ctx();
    unsigned char a[256], b[256], orig[256];
    fill_pattern(a, sizeof(a), 1);
    fill_pattern(b, sizeof(b), 2);
    memcpy(orig, b, sizeof(b));
    const size_t bad_align[] = { 0, 3, 6, 96, SIZE_MAX };
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(kvc_memcpy_async(ctx, b, a, 64, KVC_H2D, 0, bad_align[i], NULL), KVC_ERR_INVALID_ARG,
                     "alignment %zu", bad_align[i]);
        cr_assert(strstr(kvc_last_error(), "power of two"), "%s", kvc_last_error());
    }
    cr_assert_eq(kvc_memcpy_async(ctx, b, a, 0, KVC_H2D, 0, 0, NULL), KVC_ERR_INVALID_ARG,
                 "alignment is checked even for 0 bytes");
    cr_assert_eq(kvc_memcpy_async(ctx, b, a, 0, KVC_H2D, 0, 64, NULL), KVC_OK);
    cr_assert_eq(kvc_memcpy_async(ctx, NULL, a, 0, KVC_H2D, 0, 64, NULL), KVC_OK, "nothing to copy");
    cr_assert_eq(kvc_memcpy_async(ctx, NULL, a, 8, KVC_H2D, 0, 64, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_memcpy_async(ctx, b, NULL, 8, KVC_H2D, 0, 64, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_memcpy_async(ctx, b, a, 8, (kvc_direction_t)2, 0, 64, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_memcpy_async(ctx, b + 8, b, 64, KVC_H2D, 0, 64, NULL), KVC_ERR_INVALID_ARG, "overlap");
    cr_assert_eq(kvc_memcpy_async(ctx, b, a, 64, KVC_H2D, SIZE_MAX - 10, 64, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_memcpy_async(NULL, b, a, 64, KVC_H2D, 0, 64, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_arr_eq(b, orig, sizeof(b), "a rejected copy wrote something");
    kvc_context_destroy(ctx);
}

/* kvc_memcpy used to hand a negative size (as size_t) or a range wrapping the address space to the
 * backend's memcpy, which wrote before and after dst. */
Test(memory, sync_copy_refuses_wrapping_ranges)
{
    kvc_context_t *ctx = real_ctx();
    unsigned char a[64], b[64], orig[64];
    fill_pattern(a, sizeof(a), 1);
    fill_pattern(b, sizeof(b), 2);
    memcpy(orig, b, sizeof(b));
    cr_assert_eq(kvc_memcpy(ctx, b, a, (size_t)-1), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "PTRDIFF_MAX"), "%s", kvc_last_error());
    cr_assert_eq(kvc_memcpy(ctx, b, a, (size_t)PTRDIFF_MAX + 1), KVC_ERR_INVALID_ARG);
    void *top = (void *)(UINTPTR_MAX - 15);
    cr_assert_eq(kvc_memcpy(ctx, top, a, 32), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "wraps around the address space") && strstr(kvc_last_error(), "dst"), "%s",
              kvc_last_error());
    cr_assert_eq(kvc_memcpy(ctx, b, top, 32), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "src"), "%s", kvc_last_error());
    cr_assert_arr_eq(b, orig, sizeof(b), "a rejected copy wrote something");
    cr_assert_eq(kvc_memcpy(ctx, b, a, sizeof(a)), KVC_OK, "%s", kvc_last_error());
    cr_assert_arr_eq(b, a, sizeof(a));
    kvc_context_destroy(ctx);
}

/* ---------------------------------------------------------------- batched copy */

Test(memory, batched_equals_oracle)
{
    kvc_context_t *ctx = real_ctx();
    /* Many small entries, zero sizes (with NULL pointers), and a few entries of megabytes, packed
     * into one source and two destination arenas (the library and the oracle). */
    enum { N = 3000 };
    size_t sizes[N], off_src[N], off_dst[N], total = 0;
    unsigned seed = 12345;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        sizes[i] = i % 97 == 0 ? 0 : i % 1000 == 1 ? 3 * MiB + (seed % 4096) : (seed >> 8) % 700;
        total += sizes[i];
    }
    unsigned char *src = malloc(total), *got = malloc(total + N), *want = malloc(total + N);
    fill_pattern(src, total, 5);
    memset(got, 0xcd, total + N);
    memset(want, 0xcd, total + N);
    /* Destinations in shuffled order with a gap byte between them. */
    size_t pos = 0;
    for (size_t i = 0; i < N; i++) off_src[i] = (pos += sizes[i]) - sizes[i];
    pos = 0;
    for (size_t k = 0; k < N; k++) {
        const size_t i = (k * 7919) % N;
        off_dst[i] = pos;
        pos += sizes[i] + 1;
    }
    const void *srcs[N];
    void *dg[N], *dw[N];
    for (size_t i = 0; i < N; i++) {
        srcs[i] = sizes[i] ? src + off_src[i] : NULL;
        dg[i] = sizes[i] ? got + off_dst[i] : NULL;
        dw[i] = sizes[i] ? want + off_dst[i] : NULL;
    }
    cr_assert_eq(kvc_batched_memcpy(ctx, dg, srcs, sizes, N, NULL), KVC_OK, "%s", kvc_last_error());
    ref_batched_memcpy(dw, srcs, sizes, N);
    cr_assert_arr_eq(got, want, total + N);
    /* Count 0 and all-zero sizes: nothing happens. */
    cr_assert_eq(kvc_batched_memcpy(ctx, NULL, NULL, NULL, 0, NULL), KVC_OK);
    const size_t zeros[3] = { 0, 0, 0 };
    void *nulls[3] = { NULL, NULL, NULL };
    cr_assert_eq(kvc_batched_memcpy(ctx, nulls, (const void *const *)nulls, zeros, 3, NULL), KVC_OK);
    free(src);
    free(got);
    free(want);
    kvc_context_destroy(ctx);
}

/* An entry whose own src and dst overlap is a memmove, in both directions, large or small. */
Test(memory, batched_entry_overlapping_itself_is_memmove)
{
    kvc_context_t *ctx = real_ctx();
    const size_t n = 6 * MiB;
    unsigned char *got = malloc(n), *want = malloc(n);
    fill_pattern(got, n, 11);
    memcpy(want, got, n);
    void *dsts[3] = { got + 100, got + 2 * MiB, got + 4 * MiB + 10 };
    const void *srcs[3] = { got, got + 2 * MiB + 1000, got + 4 * MiB };
    const size_t sizes[3] = { MiB + 7, MiB, 1000 };
    void *wd[3] = { want + 100, want + 2 * MiB, want + 4 * MiB + 10 };
    const void *ws[3] = { want, want + 2 * MiB + 1000, want + 4 * MiB };
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 3, NULL), KVC_OK, "%s", kvc_last_error());
    ref_batched_memcpy(wd, ws, sizes, 3);
    cr_assert_arr_eq(got, want, n);
    free(got);
    free(want);
    kvc_context_destroy(ctx);
}

Test(memory, batched_errors_write_nothing)
{
    kvc_context_t *ctx = real_ctx();
    unsigned char buf[4096], orig[4096], src[4096];
    fill_pattern(buf, sizeof(buf), 1);
    fill_pattern(src, sizeof(src), 2);
    memcpy(orig, buf, sizeof(buf));
    size_t sizes[4] = { 16, 16, 16, 16 };
    void *dsts[4] = { buf, buf + 100, buf + 200, buf + 300 };
    const void *srcs[4] = { src, src + 100, src + 200, src + 300 };

    cr_assert_eq(kvc_batched_memcpy(NULL, dsts, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_batched_memcpy(ctx, NULL, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, NULL, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, NULL, 4, NULL), KVC_ERR_INVALID_ARG);
    dsts[3] = NULL;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "entry 3"), "%s", kvc_last_error());
    dsts[3] = buf + 300;
    srcs[2] = NULL;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "entry 2"), "%s", kvc_last_error());
    srcs[2] = src + 200;
    /* Two destinations overlapping. */
    dsts[1] = buf + 8;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "dsts[0] and dsts[1] overlap"), "%s", kvc_last_error());
    dsts[1] = buf + 100;
    /* A source overlapping another entry's destination (a chain the copy order would decide). */
    srcs[3] = buf + 205;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "srcs[3] overlaps dsts[2]"), "%s", kvc_last_error());
    /* Touching ranges do not overlap; sizes wrapping the address space are rejected. */
    srcs[3] = buf + 216;
    sizes[0] = SIZE_MAX - 8;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 4, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_arr_eq(buf, orig, sizeof(buf), "a rejected batch wrote something");
    sizes[0] = 16;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, 4, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_arr_eq(buf + 300, orig + 216, 16);
    kvc_context_destroy(ctx);
}

/* Overlaps between entries far apart in a long shuffled list are found too (the destinations are
 * sorted to find them). */
Test(memory, batched_overlap_found_among_many_entries)
{
    kvc_context_t *ctx = real_ctx();
    enum { N = 5000, E = 64 };
    unsigned char *src = malloc(N * E), *dst = calloc(N + 1, E);
    void *dsts[N];
    const void *srcs[N];
    size_t sizes[N];
    for (size_t i = 0; i < N; i++) {
        srcs[i] = src + i * E;
        dsts[i] = dst + ((i * 7919) % N) * E; /* a permutation: N and 7919 are coprime */
        sizes[i] = E;
    }
    fill_pattern(src, N * E, 4);
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, N, NULL), KVC_OK, "%s", kvc_last_error());
    for (size_t i = 0; i < N; i++) cr_assert_arr_eq(dsts[i], srcs[i], E, "entry %zu", i);
    /* Entry 4321 now overlaps, by one byte, the destination that follows its own in memory. */
    memset(dst, 0, (N + 1) * E);
    const size_t victim = 4321, neighbour_slot = (victim * 7919) % N + 1;
    dsts[victim] = (unsigned char *)dsts[victim] + 1;
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, N, NULL), KVC_ERR_INVALID_ARG);
    char want[64];
    snprintf(want, sizeof(want), "dsts[%zu] and dsts[", victim);
    cr_assert(strstr(kvc_last_error(), want), "%s (neighbour slot %zu)", kvc_last_error(), neighbour_slot);
    for (size_t i = 0; i < (N + 1) * E; i++) cr_assert_eq(dst[i], 0, "a rejected batch wrote byte %zu", i);
    dsts[victim] = (unsigned char *)dsts[victim] - 1;
    /* A source inside some far entry's destination. */
    srcs[17] = dsts[N - 3];
    cr_assert_eq(kvc_batched_memcpy(ctx, dsts, srcs, sizes, N, NULL), KVC_ERR_INVALID_ARG);
    snprintf(want, sizeof(want), "srcs[17] overlaps dsts[%d]", N - 3);
    cr_assert(strstr(kvc_last_error(), want), "%s", kvc_last_error());
    free(src);
    free(dst);
    kvc_context_destroy(ctx);
}

/* ---------------------------------------------------------------- the kernel's settings */

Test(memory, hugepage_pools_match_meminfo)
{
    kvc_hugepage_pool_t pools[8];
    const int n = kvc_hugepage_pools(pools, 8);
    FILE *f = fopen("/proc/meminfo", "r");
    cr_assert_not_null(f);
    char line[256];
    long total = -1, free_pages = -1, rsvd = -1, size_kb = -1;
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "HugePages_Total: %ld", &total);
        sscanf(line, "HugePages_Free: %ld", &free_pages);
        sscanf(line, "HugePages_Rsvd: %ld", &rsvd);
        sscanf(line, "Hugepagesize: %ld kB", &size_kb);
    }
    fclose(f);
    if (size_kb < 0) {
        cr_assert_eq(n, 0);
        return;
    }
    int found = 0;
    for (int i = 0; i < n && i < 8; i++) {
        if (i) cr_assert_gt(pools[i].page_size, pools[i - 1].page_size, "sorted by page size");
        if (pools[i].page_size != (uint64_t)size_kb * 1024) continue;
        found = 1;
        cr_assert_eq(pools[i].total, (uint64_t)total);
        cr_assert_eq(pools[i].free, (uint64_t)free_pages);
        cr_assert_eq(pools[i].reserved, (uint64_t)rsvd);
    }
    cr_assert(found, "the default hugepage size %ld kB is not among the pools", size_kb);
    char buf[256] = "";
    f = fopen(KVC_SYS_THP_ENABLED, "r");
    if (f) {
        cr_assert_not_null(fgets(buf, sizeof(buf), f));
        fclose(f);
        char bracketed[32];
        snprintf(bracketed, sizeof(bracketed), "[%s]", kvc_thp_mode_name(kvc_thp_mode()));
        cr_assert(strstr(buf, bracketed), "%s vs %s", buf, bracketed);
    } else {
        cr_assert_eq(kvc_thp_mode(), KVC_THP_UNAVAILABLE);
    }
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    for (char *s = strchr(path + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static const char *fake_tree(void)
{
    static char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/kvc-test-sys-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return dir;
}

Test(memory, hugepage_pools_from_a_fake_tree)
{
    const char *d = fake_tree();
    write_file(d, "hugepages-1048576kB/nr_hugepages", "2\n");
    write_file(d, "hugepages-1048576kB/free_hugepages", "1\n");
    write_file(d, "hugepages-1048576kB/resv_hugepages", "0\n");
    write_file(d, "hugepages-1048576kB/surplus_hugepages", "0\n");
    write_file(d, "hugepages-2048kB/nr_hugepages", "512\n");
    write_file(d, "hugepages-2048kB/free_hugepages", "500\n");
    write_file(d, "hugepages-2048kB/resv_hugepages", "12\n");
    write_file(d, "hugepages-2048kB/surplus_hugepages", "3\n");
    write_file(d, "not-a-pool/nr_hugepages", "9\n");
    kvc_hugepage_pool_t p[1];
    cr_assert_eq(kvc_sys_hugepage_pools_at(d, p, 1), 2, "counts all pools, writes max");
    cr_assert_eq(p[0].page_size, 2 * MiB);
    cr_assert_eq(p[0].total, 512);
    cr_assert_eq(p[0].free, 500);
    cr_assert_eq(p[0].reserved, 12);
    cr_assert_eq(p[0].surplus, 3);
    cr_assert_eq(kvc_sys_hugepage_pools_at("/nonexistent", p, 1), 0);
    write_file(d, "thp", "always madvise [never]\n");
    char path[128];
    snprintf(path, sizeof(path), "%s/thp", d);
    cr_assert_eq(kvc_sys_thp_mode_at(path), KVC_THP_NEVER);
    cr_assert_eq(kvc_sys_thp_mode_at("/nonexistent"), KVC_THP_UNAVAILABLE);
}

/* The last-level cache a transfer's streaming threshold comes from. */
Test(memory, llc_from_a_fake_sysfs_cache_dir)
{
    const char *d = fake_tree();
    write_file(d, "index0/level", "1\n");
    write_file(d, "index0/type", "Data\n");
    write_file(d, "index0/size", "48K\n");
    write_file(d, "index1/level", "1\n");
    write_file(d, "index1/type", "Instruction\n");
    write_file(d, "index1/size", "32K\n");
    write_file(d, "index2/level", "2\n");
    write_file(d, "index2/type", "Unified\n");
    write_file(d, "index2/size", "1024K\n");
    cr_assert_eq(kvc_sys_llc_bytes_at(d), 1 << 20, "the highest level that is not an instruction cache");
    write_file(d, "index3/level", "3\n");
    write_file(d, "index3/type", "Unified\n");
    write_file(d, "index3/size", "32768K\n");
    cr_assert_eq(kvc_sys_llc_bytes_at(d), 32 << 20);
    cr_assert_eq(kvc_sys_llc_bytes_at("/nonexistent"), 0);
}

Test(memory, llc_cpuid_only_is_capped)
{
    kvc_llc_info_t l;
    /* A 2-vCPU EPYC guest without sysfs cache information: CPUID says 508 MiB (the host's cache). */
    kvc_sys_llc_resolve(0, 532676608, &l);
    cr_assert_eq(l.source, KVC_LLC_CPUID_CAPPED);
    cr_assert_eq(l.bytes, KVC_LLC_CPUID_CAP);
    cr_assert_eq(l.cpuid_bytes, 532676608);
    cr_assert_eq(l.sysfs_bytes, 0);
    kvc_sys_llc_resolve(0, 16 << 20, &l);
    cr_assert_eq(l.source, KVC_LLC_CPUID);
    cr_assert_eq(l.bytes, 16 << 20);
    /* sysfs is the kernel's view: believed above the cap, CPUID only when it says less. */
    kvc_sys_llc_resolve(96 << 20, 402653184, &l);
    cr_assert_eq(l.source, KVC_LLC_SYSFS);
    cr_assert_eq(l.bytes, 96 << 20);
    kvc_sys_llc_resolve(32 << 20, 16 << 20, &l);
    cr_assert_eq(l.bytes, 16 << 20);
    kvc_sys_llc_resolve(0, -1, &l);
    cr_assert_eq(l.source, KVC_LLC_UNKNOWN);
    cr_assert_eq(l.bytes, 0);
}

Test(memory, stream_threshold_of_a_context)
{
    kvc_llc_info_t l;
    cr_assert_eq(kvc_llc_info(NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_llc_info(&l), KVC_OK);
    kvc_context_t *ctx = NULL;
    unsetenv("KVCORE_STREAM_MIN_BYTES");
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK);
    const int64_t want = l.bytes / 4 * 3 > (4 << 20) ? l.bytes / 4 * 3 : 4 << 20;
    cr_assert_eq(kvc_context_stream_min_bytes(ctx), want, "3/4 of %" PRId64 " (%s)", l.bytes,
                 kvc_llc_source_name(l.source));
    kvc_context_destroy(ctx);
    setenv("KVCORE_STREAM_MIN_BYTES", "12345", 1);
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK);
    cr_assert_eq(kvc_context_stream_min_bytes(ctx), 12345);
    kvc_context_destroy(ctx);
    unsetenv("KVCORE_STREAM_MIN_BYTES");
    cr_assert_eq(kvc_context_stream_min_bytes(NULL), -1);
}

Test(memory, cgroup_v2_limits_from_a_fake_tree)
{
    const char *root = fake_tree();
    char self[128];
    snprintf(self, sizeof(self), "%s/self-cgroup", root);
    write_file(root, "self-cgroup", "0::/kubepods/pod1/ctr\n");
    write_file(root, "cgroup.controllers", "cpuset cpu memory\n");
    write_file(root, "cpuset.cpus.effective", "0-63\n");
    write_file(root, "cpuset.mems.effective", "0-1\n");
    write_file(root, "kubepods/memory.max", "8589934592\n");
    write_file(root, "kubepods/pod1/memory.max", "4294967296\n");
    write_file(root, "kubepods/pod1/ctr/memory.max", "max\n");
    write_file(root, "kubepods/pod1/ctr/memory.current", "123456\n");
    write_file(root, "kubepods/pod1/ctr/cpuset.cpus.effective", "4-7\n");
    kvc_cgroup_info_t c;
    cr_assert_eq(kvc_sys_cgroup_at(root, self, &c), 0);
    cr_assert_eq(c.version, 2);
    cr_assert(strstr(c.memory_path, "/kubepods/pod1/ctr"), "%s", c.memory_path);
    cr_assert_eq(c.memory_limit, 4294967296, "the smallest limit on the way to the root");
    cr_assert_eq(c.memory_usage, 123456);
    cr_assert_str_eq(c.cpuset_cpus, "4-7");
    cr_assert_str_eq(c.cpuset_mems, "0-1", "inherited from the nearest ancestor that says");
}

Test(memory, cgroup_v1_limits_from_a_fake_tree)
{
    const char *root = fake_tree();
    char self[128];
    snprintf(self, sizeof(self), "%s/self-cgroup", root);
    write_file(root, "self-cgroup", "5:cpuacct,cpu:/\n4:memory:/job/42\n3:cpuset:/job\n0::/\n");
    write_file(root, "memory/memory.limit_in_bytes", "9223372036854771712\n");
    write_file(root, "memory/job/memory.limit_in_bytes", "9223372036854771712\n");
    write_file(root, "memory/job/42/memory.limit_in_bytes", "1073741824\n");
    write_file(root, "memory/job/42/memory.usage_in_bytes", "4096\n");
    write_file(root, "cpuset/cpuset.effective_cpus", "0-15\n");
    write_file(root, "cpuset/job/cpuset.effective_cpus", "2,3\n");
    write_file(root, "cpuset/job/cpuset.mems", "1\n");
    kvc_cgroup_info_t c;
    cr_assert_eq(kvc_sys_cgroup_at(root, self, &c), 0);
    cr_assert_eq(c.version, 1);
    cr_assert_eq(c.memory_limit, 1073741824);
    cr_assert_eq(c.memory_usage, 4096);
    cr_assert_str_eq(c.cpuset_cpus, "2,3");
    cr_assert_str_eq(c.cpuset_mems, "1", "cpuset.mems when there is no effective_mems");
    /* Unlimited everywhere reads as -1; no cgroup file system at all as version 0. */
    write_file(root, "memory/job/42/memory.limit_in_bytes", "9223372036854771712\n");
    cr_assert_eq(kvc_sys_cgroup_at(root, self, &c), 0);
    cr_assert_eq(c.memory_limit, -1);
    cr_assert_eq(kvc_sys_cgroup_at("/nonexistent", self, &c), 0);
    cr_assert_eq(c.version, 0);
    cr_assert_eq(c.memory_limit, -1);
}

Test(memory, cgroup_and_node_memory_on_this_machine)
{
    kvc_cgroup_info_t c;
    cr_assert_eq(kvc_cgroup_info(&c), KVC_OK);
    cr_assert_eq(kvc_cgroup_info(NULL), KVC_ERR_INVALID_ARG);
    struct stat st;
    if (stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) cr_assert_eq(c.version, 2);
    else if (stat("/sys/fs/cgroup/memory", &st) == 0) cr_assert_eq(c.version, 1);
    if (c.memory_path[0]) cr_assert_eq(stat(c.memory_path, &st), 0, "%s", c.memory_path);
    kvc_context_t *ctx = real_ctx();
    for (int i = 0; i < kvc_topology_numa_count(ctx); i++) {
        kvc_numa_node_info_t n;
        cr_assert_eq(kvc_topology_numa_node(ctx, i, &n), KVC_OK);
        cr_assert_gt(n.free_bytes, 0);
        cr_assert_leq((uint64_t)n.free_bytes, n.total_bytes + (64 * MiB), "node %u", n.os_index);
    }
    kvc_context_destroy(ctx);
}

/* The cgroup CPU quota behind the thread cap (kvc_context_create): the smallest quota/period on
 * the way to the root, v2 and v1, -1 when unlimited. */
Test(memory, cgroup_cpu_quota_from_fake_trees)
{
    const char *root = fake_tree();
    char self[128];
    snprintf(self, sizeof(self), "%s/self-cgroup", root);
    write_file(root, "self-cgroup", "0::/kubepods/pod1/ctr\n");
    write_file(root, "cgroup.controllers", "cpuset cpu memory\n");
    write_file(root, "kubepods/cpu.max", "max 100000\n");
    write_file(root, "kubepods/pod1/cpu.max", "250000 100000\n");
    write_file(root, "kubepods/pod1/ctr/cpu.max", "max 100000\n");
    cr_assert_float_eq(kvc_sys_cpu_quota_at(root, self), 2.5, 1e-9);
    write_file(root, "kubepods/pod1/cpu.max", "max 100000\n");
    cr_assert_float_eq(kvc_sys_cpu_quota_at(root, self), -1.0, 1e-9);

    const char *v1 = fake_tree();
    snprintf(self, sizeof(self), "%s/self-cgroup", v1);
    write_file(v1, "self-cgroup", "5:cpuacct,cpu:/job\n4:memory:/job/42\n0::/\n");
    write_file(v1, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    write_file(v1, "cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    write_file(v1, "cpu,cpuacct/job/cpu.cfs_quota_us", "50000\n");
    write_file(v1, "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
    cr_assert_float_eq(kvc_sys_cpu_quota_at(v1, self), 0.5, 1e-9);
    cr_assert_float_eq(kvc_sys_cpu_quota_at("/nonexistent", self), -1.0, 1e-9);
}

/* ---------------------------------------------------------------- device files (PCIe BARs) */

/* A temporary file of `size` bytes standing in for a sysfs resource file (the same open/fstat/mmap
 * path: a resource file is a regular file whose size is the BAR's length). */
static char *bar_file(size_t size)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/kvc-bar.XXXXXX");
    const int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)size), 0);
    for (size_t i = 0; i < size; i += 4096) {
        const uint8_t v = (uint8_t)(i / 4096);
        cr_assert_eq(pwrite(fd, &v, 1, (off_t)i), 1);
    }
    close(fd);
    return path;
}

Test(memory, map_file_reads_and_writes_the_device_bytes)
{
    kvc_context_t *ctx = real_ctx();
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *path = bar_file(8 * page);
    void *p = NULL;
    kvc_mem_report_t r;
    cr_assert_eq(kvc_mem_map_file(ctx, path, 3 * page, 2 * page, 0, &p, &r), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(((uint8_t *)p)[0], (uint8_t)2, "the mapping starts at the offset");
    cr_assert_eq(((uint8_t *)p)[page], (uint8_t)3);
    ((uint8_t *)p)[1] = 0xab; /* shared: the write reaches the file (the device) */
    cr_assert_eq(r.kind_obtained, KVC_MEM_DEVICE_FILE);
    cr_assert(r.attached && !r.pinned);
    cr_assert_str_eq(r.name, path);
    cr_assert_eq(r.size, 3 * page);
    kvc_mem_info_t info;
    cr_assert_eq(kvc_mem_live_count(ctx), 1);
    cr_assert_eq(kvc_mem_live_get(ctx, 0, &info), KVC_OK);
    cr_assert_eq(info.ptr, p);
    char kname[64];
    cr_assert_str_eq(kvc_mem_kind_name(info.kind, kname, sizeof(kname)), "device-file");
    cr_assert_eq(kvc_mem_free(ctx, p), KVC_OK);
    cr_assert_eq(kvc_mem_free(ctx, p), KVC_ERR_STATE, "double free");
    const int fd = open(path, O_RDONLY);
    uint8_t v = 0;
    cr_assert_eq(pread(fd, &v, 1, (off_t)(2 * page + 1)), 1);
    cr_assert_eq(v, 0xab);
    close(fd);
    cr_assert_eq(access(path, F_OK), 0, "the file is left alone");
    unlink(path);
    kvc_context_destroy(ctx);
}

Test(memory, map_file_pinned)
{
    kvc_context_t *ctx = real_ctx();
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *path = bar_file(64 * page);
    const uint64_t before = status_kb_field("VmLck");
    void *p = NULL;
    kvc_mem_report_t r;
    kvc_status_t st = kvc_mem_map_file(ctx, path, 64 * page, 0, KVC_MEM_PINNED, &p, &r);
    if (st == KVC_ERR_LIMIT || st == KVC_ERR_NO_MEMORY) cr_skip_test("cannot lock 64 pages here: %s", kvc_last_error());
    cr_assert_eq(st, KVC_OK, "%s", kvc_last_error());
    cr_assert(r.pinned);
    cr_assert_eq(r.kind_obtained, KVC_MEM_DEVICE_FILE | KVC_MEM_PINNED);
    cr_assert_geq(status_kb_field("VmLck") - before, 64 * page / 1024);
    cr_assert_eq(kvc_mem_free(ctx, p), KVC_OK);
    cr_assert_eq(status_kb_field("VmLck"), before);
    unlink(path);
    kvc_context_destroy(ctx);
}

Test(memory, map_file_errors_have_exact_status)
{
    kvc_context_t *ctx = real_ctx();
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *path = bar_file(4 * page);
    void *p = (void *)0x1;
    cr_assert_eq(kvc_mem_map_file(ctx, NULL, page, 0, 0, &p, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_map_file(ctx, path, page, 0, 0, NULL, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_map_file(ctx, path, 0, 0, 0, &p, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_map_file(ctx, path, page, 100, 0, &p, NULL), KVC_ERR_INVALID_ARG, "unaligned offset");
    cr_assert(strstr(kvc_last_error(), "page size"), "%s", kvc_last_error());
    cr_assert_eq(kvc_mem_map_file(ctx, path, page, 0, KVC_MEM_NUMA, &p, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_mem_map_file(ctx, path, 4 * page + 1, 0, 0, &p, NULL), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_mem_map_file(ctx, path, page, 4 * page, 0, &p, NULL), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_mem_map_file(ctx, path, page, SIZE_MAX - page + 1, 0, &p, NULL), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_mem_map_file(ctx, "/nonexistent/kvc-bar", page, 0, 0, &p, NULL), KVC_ERR_NOT_FOUND);
    cr_assert_eq(kvc_mem_map_file(ctx, "/tmp", page, 0, 0, &p, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "directory"), "%s", kvc_last_error());
    char fifo[] = "/tmp/kvc-bar-fifo.XXXXXX";
    cr_assert_not_null(mkdtemp(fifo));
    char fpath[64];
    snprintf(fpath, sizeof(fpath), "%s/f", fifo);
    cr_assert_eq(mkfifo(fpath, 0600), 0);
    cr_assert_eq(kvc_mem_map_file(ctx, fpath, page, 0, 0, &p, NULL), KVC_ERR_INVALID_ARG, "a FIFO, without blocking");
    unlink(fpath);
    /* A unix socket cannot even be opened (ENXIO): the wrong kind of file, as memory.h says. */
    const int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", fifo);
    cr_assert_eq(bind(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(kvc_mem_map_file(ctx, sa.sun_path, page, 0, 0, &p, NULL), KVC_ERR_INVALID_ARG, "a socket");
    cr_assert(strstr(kvc_last_error(), "socket"), "%s", kvc_last_error());
    close(sock);
    unlink(sa.sun_path);
    rmdir(fifo);
    cr_assert_eq(kvc_mem_map_file(ctx, "/dev/null", page, 0, 0, &p, NULL), KVC_ERR_INVALID_ARG, "a device node");
    chmod(path, 0400);
    if (geteuid() != 0) cr_assert_eq(kvc_mem_map_file(ctx, path, page, 0, 0, &p, NULL), KVC_ERR_PERMISSION);
    cr_assert_eq(p, (void *)0x1, "*out untouched on error");
    cr_assert_eq(kvc_mem_live_count(ctx), 0);
    unlink(path);
    kvc_context_destroy(ctx);
}
