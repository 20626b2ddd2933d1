/* SPDX-License-Identifier: BSD-3-Clause */
/* Context creation, backend discovery/selection on recorded topologies, module loading errors. */
#define _GNU_SOURCE /* sched_setaffinity */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>
#include <kvcore/backend.h> /* KVC_BACKEND_ABI_VERSION */

#include "test_util.h"

#define TOPO_CPU_ONLY "topologies/16amd64-4distances.xml"
#define TOPO_NV_AMD "topologies/24em64t-2n6c2t-pci.xml"
#define TOPO_DGX2 "topologies/nvidiaDGX2.xml"

static void use_topology(const char *rel) { setenv("HWLOC_XMLFILE", kvc_test_data(rel), 1); }

static kvc_backend_info_t backend(kvc_context_t *ctx, const char *name)
{
    kvc_backend_info_t b = { 0 };
    for (int i = 0; i < kvc_context_backend_count(ctx); i++) {
        cr_assert_eq(kvc_context_backend_info(ctx, i, &b), KVC_OK);
        if (!strcmp(b.name, name)) return b;
    }
    cr_assert_fail("backend %s not listed", name);
    return b;
}

static const char *fake(const char *which) { return kvc_test_build(which); }
#define FAKE_GOOD fake("tests/modules/.libs/fake_good.so")
#define FAKE_BADABI fake("tests/modules/.libs/fake_badabi.so")

static kvc_status_t create_forced(const char *backend_name, kvc_context_t **ctx)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND, .backend = backend_name };
    return kvc_context_create(&p, ctx);
}

Test(context, create_destroy_defaults)
{
    use_topology(TOPO_CPU_ONLY);
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK, "%s", kvc_last_error());
    cr_assert_str_eq(kvc_context_backend_name(ctx), "cpu");
    cr_assert_gt(kvc_context_num_threads(ctx), 0);
    cr_assert_eq(kvc_topology_numa_count(ctx), 8);
    cr_assert(kvc_topology_is_synthetic(ctx));
    kvc_backend_info_t cpu = backend(ctx, "cpu");
    cr_assert(cpu.selected && cpu.loaded && cpu.num_devices == 1);
    kvc_backend_info_t cu = backend(ctx, "cuda");
    cr_assert_not(cu.selected);
    cr_assert_not(cu.loaded, "cuda must not be opened without an NVIDIA device: %s", cu.reason);
    if (cu.built) cr_assert(strstr(cu.reason, "hwloc shows no NVIDIA GPU"), "reason: %s", cu.reason);
    kvc_context_destroy(ctx);
    kvc_context_destroy(NULL);
}

Test(context, null_out_is_invalid)
{
    cr_assert_eq(kvc_context_create(NULL, NULL), KVC_ERR_INVALID_ARG);
}

Test(context, negative_device_is_invalid)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_DEVICE, .device = -1 };
    kvc_context_t *ctx = (kvc_context_t *)0x1;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_ERR_INVALID_ARG);
    cr_assert_eq(ctx, (kvc_context_t *)0x1, "out must be untouched on failure");
}

Test(context, forced_unknown_backend)
{
    kvc_context_t *ctx;
    cr_assert_eq(create_forced("opencl", &ctx), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "unknown"), "%s", kvc_last_error());
}

Test(context, forced_backend_from_environment)
{
    setenv("KVCORE_BACKEND", "nonsense", 1);
    kvc_context_t *ctx;
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_ERR_INVALID_ARG);
    setenv("KVCORE_BACKEND", "cpu", 1);
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK);
    cr_assert_str_eq(kvc_context_backend_name(ctx), "cpu");
    kvc_context_destroy(ctx);
}

Test(context, forced_module_missing)
{
    setenv("KVCORE_MODULE_PATH", "/nonexistent/kvcore-modules", 1);
    kvc_context_t *ctx;
    cr_assert_eq(create_forced("cuda", &ctx), KVC_ERR_NOT_FOUND);
    cr_assert(strstr(kvc_last_error(), "KVCORE_MODULE_PATH"), "error must say what to do: %s", kvc_last_error());
    cr_assert_eq(create_forced("hip", &ctx), KVC_ERR_NOT_FOUND);
}

Test(context, wrong_abi_module_rejected)
{
    setenv("KVCORE_MODULE_PATH", kvc_test_module_dir(FAKE_BADABI, "kvcore_cuda.so"), 1);
    kvc_context_t *ctx;
    cr_assert_eq(create_forced("cuda", &ctx), KVC_ERR_ABI, "%s", kvc_last_error());
    cr_assert(strstr(kvc_last_error(), "999"), "%s", kvc_last_error());
    /* One number, the one NEWS, docs/ARCHITECTURE.md and backend.h name (6) */
    cr_assert_eq(KVC_BACKEND_ABI_VERSION, 6u);
    cr_assert(strstr(kvc_last_error(), "this kvcore needs 6"), "%s", kvc_last_error());
    /* Not forced: the bad module is skipped and the CPU backend still works. */
    use_topology(TOPO_NV_AMD);
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK);
    cr_assert_str_eq(kvc_context_backend_name(ctx), "cpu");
    kvc_backend_info_t cu = backend(ctx, "cuda");
    cr_assert_not(cu.loaded);
    cr_assert(strstr(cu.reason, "ABI mismatch"), "%s", cu.reason);
    kvc_context_destroy(ctx);
}

Test(context, forced_module_without_device)
{
    setenv("KVCORE_MODULE_PATH", kvc_test_module_dir(FAKE_GOOD, "kvcore_cuda.so"), 1);
    setenv("KVC_FAKE_NDEV", "0", 1);
    kvc_context_t *ctx;
    cr_assert_eq(create_forced("cuda", &ctx), KVC_ERR_NO_DEVICE);
    cr_assert(strstr(kvc_last_error(), "KVCORE_BACKEND"), "error must give a remedy: %s", kvc_last_error());
}

/* A module without the pointer_kind slot (built before dispatch by residence) gets every call, as
 * before: host data is not moved to the CPU ops behind its back. */
Test(context, module_without_pointer_kind_gets_every_call)
{
    setenv("KVCORE_MODULE_PATH", kvc_test_module_dir(FAKE_GOOD, "kvcore_cuda.so"), 1);
    setenv("KVC_FAKE_NDEV", "1", 1);
    kvc_context_t *ctx;
    cr_assert_eq(create_forced("cuda", &ctx), KVC_OK, "%s", kvc_last_error());
    float x[8] = { 0 };
    uint8_t sym[8];
    float scale[1];
    uint32_t bins[1] = { 32 };
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F32, .values = x, .symbols = sym, .scales = scale, .bins = bins,
                           .layers = 1, .tokens = 1, .channels = 8 };
    cr_assert_eq(kvc_quantise(ctx, &q), KVC_ERR_UNSUPPORTED, "%s", kvc_last_error());
    cr_assert(strstr(kvc_last_error(), "quantise"), "%s", kvc_last_error());
    kvc_context_destroy(ctx);
}

Test(context, nvidia_topology_selects_gpu_module)
{
    use_topology(TOPO_NV_AMD);
    setenv("KVCORE_MODULE_PATH", kvc_test_module_dir(FAKE_GOOD, "kvcore_cuda.so"), 1);
    setenv("KVC_FAKE_NDEV", "3", 1);
    kvc_context_t *ctx;
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK, "%s", kvc_last_error());
    kvc_backend_info_t cu = backend(ctx, "cuda");
    cr_assert(cu.loaded && cu.selected && cu.num_devices == 3, "%s", cu.reason);
    cr_assert_not(backend(ctx, "cpu").selected);
    /* The fake leaves stream_synchronize NULL: the core resolved it to the unsupported stub. */
    cr_assert_eq(kvc_stream_synchronize(ctx, NULL), KVC_ERR_UNSUPPORTED);
    char bus[16];
    cr_assert_eq(kvc_device_pci_bus_id(ctx, 0, bus, sizeof(bus)), KVC_OK);
    cr_assert_str_eq(bus, "0000:06:00.0");
    cr_assert_eq(kvc_device_pci_bus_id(ctx, 0, bus, 8), KVC_ERR_NO_SPACE);
    cr_assert_eq(kvc_device_pci_bus_id(ctx, -1, bus, sizeof(bus)), KVC_ERR_OUT_OF_RANGE);
    /* 3 NVIDIA GPUs and one AMD display chip on the PCI bus. */
    int nv = 0, amd = 0;
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        cr_assert_eq(kvc_topology_gpu(ctx, i, &g), KVC_OK);
        nv += g.vendor_id == 0x10de;
        amd += g.vendor_id == 0x1002;
    }
    cr_assert_eq(nv, 3);
    cr_assert_eq(amd, 1);
    kvc_context_destroy(ctx);
}

Test(context, cpu_only_topology_does_not_open_modules)
{
    use_topology(TOPO_CPU_ONLY);
    setenv("KVCORE_MODULE_PATH", kvc_test_module_dir(FAKE_GOOD, "kvcore_cuda.so"), 1);
    setenv("KVC_FAKE_NDEV", "3", 1); /* would win if it were opened */
    kvc_context_t *ctx;
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK);
    cr_assert_str_eq(kvc_context_backend_name(ctx), "cpu");
    cr_assert_not(backend(ctx, "cuda").loaded);
    kvc_context_destroy(ctx);
    /* --all opens it anyway (kvcore info --all), without selecting it over a forced cpu. */
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_LOAD_ALL | KVC_CONTEXT_PARAM_BACKEND,
                               .load_all_modules = 1,
                               .backend = "cpu" };
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK);
    kvc_backend_info_t cu = backend(ctx, "cuda");
    cr_assert(cu.loaded && !cu.selected && cu.num_devices == 3, "%s", cu.reason);
    cr_assert_str_eq(kvc_context_backend_name(ctx), "cpu");
    kvc_context_destroy(ctx);
}

/* The real modules, when built: on this CPU-only CI machine they load and report no device. */
Test(context, real_modules_load_without_device)
{
    use_topology(TOPO_NV_AMD);
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_LOAD_ALL, .load_all_modules = 1 };
    kvc_context_t *ctx;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK, "%s", kvc_last_error());
    int tested = 0;
    for (int i = 1; i < kvc_context_backend_count(ctx); i++) {
        kvc_backend_info_t b;
        kvc_context_backend_info(ctx, i, &b);
        if (!b.built) continue;
        tested++;
        cr_assert(b.loaded, "%s module did not load: %s", b.name, b.reason);
        if (b.num_devices == 0) {
            cr_assert_not(b.selected);
            cr_assert(strstr(b.reason, "no device"), "%s: %s", b.name, b.reason);
        }
    }
    const char *selected = kvc_context_backend_name(ctx);
    kvc_context_destroy(ctx);
    if (!tested) cr_skip_test("no GPU module was built (configure found neither nvcc nor hipcc)");
    cr_log_info("selected %s", selected);
}

Test(context, amd_display_chip_is_not_a_hip_device)
{
    use_topology(TOPO_NV_AMD);
    kvc_context_t *ctx;
    cr_assert_eq(kvc_context_create(NULL, &ctx), KVC_OK);
    kvc_backend_info_t hip = backend(ctx, "hip");
    if (!hip.built) {
        kvc_context_destroy(ctx);
        cr_skip_test("HIP module not built");
    }
    /* hwloc shows the ATI ES1000 (1002:515e): the module is opened, its probe decides. */
    cr_assert(hip.loaded, "%s", hip.reason);
    if (hip.num_devices == 0) {
        cr_assert_not(hip.selected);
        cr_assert(strstr(hip.reason, "0000:01:03.0"), "%s", hip.reason);
    }
    kvc_context_destroy(ctx);
}

Test(context, numa_of_pci_device_by_bus_id)
{
    use_topology(TOPO_DGX2);
    kvc_context_t *ctx = kvc_test_cpu_context();
    int seen[2] = { 0, 0 };
    cr_assert_eq(kvc_topology_gpu_count(ctx), 16);
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        kvc_topology_gpu(ctx, i, &g);
        int node = -1;
        cr_assert_eq(kvc_topology_numa_of_pci(ctx, g.bus_id, &node), KVC_OK);
        cr_assert_eq(node, g.numa_node);
        cr_assert(node == 0 || node == 1);
        seen[node]++;
    }
    cr_assert_eq(seen[0], 8);
    cr_assert_eq(seen[1], 8);
    int node;
    cr_assert_eq(kvc_topology_numa_of_pci(ctx, "zz:00.0", &node), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_topology_numa_of_pci(ctx, "0000:ff:1f.7", &node), KVC_ERR_NOT_FOUND);
    cr_assert_eq(kvc_topology_numa_of_pci(ctx, NULL, &node), KVC_ERR_INVALID_ARG);
    kvc_pci_device_t g;
    cr_assert_eq(kvc_topology_gpu(ctx, 16, &g), KVC_ERR_OUT_OF_RANGE);
    kvc_context_destroy(ctx);
}

Test(context, isa_cap)
{
    setenv("KVCORE_ISA", "scalar", 1);
    kvc_context_t *ctx = kvc_test_cpu_context();
    cr_assert_str_eq(kvc_context_isa(ctx), "scalar");
    kvc_context_destroy(ctx);
    setenv("KVCORE_ISA", "not-an-isa", 1);
    ctx = kvc_test_cpu_context();
    const char *isa = kvc_context_isa(ctx);
    cr_assert(!strcmp(isa, "scalar") || !strcmp(isa, "avx2") || !strcmp(isa, "avx512") || !strcmp(isa, "neon"));
    kvc_context_destroy(ctx);
}

Test(context, cpu_backend_stream_ops)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    cr_assert_eq(kvc_stream_synchronize(ctx, NULL), KVC_OK);
    char bus[16];
    cr_assert_eq(kvc_device_pci_bus_id(ctx, 0, bus, sizeof(bus)), KVC_ERR_UNSUPPORTED);
    kvc_context_destroy(ctx);
}

Test(context, env_knob_table)
{
    const char *want[] = { "KVCORE_BACKEND", "KVCORE_MODULE_PATH", "KVCORE_LOG_LEVEL", "KVCORE_ISA" };
    for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
        int found = 0;
        for (size_t i = 0; i < kvc_env_knob_count(); i++) {
            kvc_env_knob_t k;
            cr_assert_eq(kvc_env_knob_get(i, &k), KVC_OK);
            cr_assert_not_null(k.help);
            found |= !strcmp(k.name, want[w]);
        }
        cr_assert(found, "%s missing from the knob table", want[w]);
    }
    kvc_env_knob_t k;
    cr_assert_eq(kvc_env_knob_get(kvc_env_knob_count(), &k), KVC_ERR_INVALID_ARG);
}

/* The live machine is discovered once per process and copied into each context; a topology from
 * the environment is loaded for each context, so it can change between contexts. */
Test(context, live_topology_shared_environment_topology_per_context)
{
    unsetenv("HWLOC_XMLFILE");
    kvc_context_t *a = NULL, *b = NULL, *x = NULL;
    cr_assert_eq(kvc_context_create(NULL, &a), KVC_OK);
    cr_assert_eq(kvc_context_create(NULL, &b), KVC_OK);
    cr_assert_not(kvc_topology_is_synthetic(a));
    cr_assert_eq(kvc_topology_numa_count(a), kvc_topology_numa_count(b));
    cr_assert_eq(kvc_topology_gpu_count(a), kvc_topology_gpu_count(b));
    kvc_context_destroy(a); /* b keeps its own copy */
    cr_assert_gt(kvc_topology_numa_count(b), 0);
    use_topology(TOPO_DGX2);
    cr_assert_eq(kvc_context_create(NULL, &x), KVC_OK);
    cr_assert(kvc_topology_is_synthetic(x));
    cr_assert_eq(kvc_topology_gpu_count(x), 16);
    kvc_context_destroy(x);
    unsetenv("HWLOC_XMLFILE");
    cr_assert_eq(kvc_context_create(NULL, &a), KVC_OK);
    cr_assert_not(kvc_topology_is_synthetic(a));
    cr_assert_eq(kvc_topology_numa_count(a), kvc_topology_numa_count(b));
    kvc_context_destroy(a);
    kvc_context_destroy(b);
}

/* ---- thread caps ---- */

/* Pin the test process to one CPU of its mask: the cap is then KVC_THREADS_PER_CPU (the cgroup
 * quota, rounded up, is at least 1). */
static void one_cpu(void)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    int first = 0;
    while (!CPU_ISSET(first, &set)) first++;
    CPU_ZERO(&set);
    CPU_SET(first, &set);
    cr_assert_eq(sched_setaffinity(0, sizeof(set), &set), 0);
}

static int threads_for(int requested, const char *env)
{
    if (env) setenv("KVCORE_NUM_THREADS", env, 1);
    else unsetenv("KVCORE_NUM_THREADS");
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | (env ? 0 : KVC_CONTEXT_PARAM_NUM_THREADS),
                               .backend = "cpu",
                               .num_threads = requested };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK, "%s", kvc_last_error());
    const int n = kvc_context_num_threads(ctx);
    /* A parallel op with that team (1 MiB: above the copy's parallel threshold). */
    const size_t bytes = 1 << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 7, bytes);
    cr_assert_eq(kvc_memcpy(ctx, b, a, bytes), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(memcmp(a, b, bytes), 0);
    free(a);
    free(b);
    kvc_context_destroy(ctx);
    return n;
}

/* 100000 threads used to be accepted and crash the first parallel region (or make libgomp end
 * the process); requests above the cap are now lowered to it, in the API and the environment. */
Test(context, thread_count_capped_by_usable_cpus)
{
    one_cpu();
    cr_assert_eq(threads_for(100000, NULL), KVC_THREADS_PER_CPU);
    cr_assert_eq(threads_for(KVC_THREADS_PER_CPU + 1, NULL), KVC_THREADS_PER_CPU);
    cr_assert_eq(threads_for(KVC_THREADS_PER_CPU, NULL), KVC_THREADS_PER_CPU);
    cr_assert_eq(threads_for(3, NULL), 3);
    cr_assert_eq(threads_for(0, "4096"), KVC_THREADS_PER_CPU);
    cr_assert_eq(threads_for(0, "100000"), KVC_THREADS_PER_CPU);
    cr_assert_eq(threads_for(0, "2"), 2);
    unsetenv("KVCORE_NUM_THREADS");
}
