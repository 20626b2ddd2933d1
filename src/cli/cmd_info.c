/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore info [--json] [--all]: what this build and this machine offer. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <kvcore.h>

#include "cli.h"
#include "json.h"
#include "util.h"

/* Hugepage pools, THP and cgroup limits: always the running kernel's, even with an XML topology. */
static void print_memory_text(void)
{
    kvc_hugepage_pool_t pools[8];
    const int n = kvc_hugepage_pools(pools, 8);
    printf("\nhugepages (transparent: %s):\n", kvc_thp_mode_name(kvc_thp_mode()));
    if (n == 0) printf("  no hugetlb pools\n");
    for (int i = 0; i < n && i < 8; i++)
        printf("  %6llu kB pages: %llu total, %llu free, %llu reserved, %llu surplus\n",
               (unsigned long long)(pools[i].page_size >> 10), (unsigned long long)pools[i].total,
               (unsigned long long)pools[i].free, (unsigned long long)pools[i].reserved,
               (unsigned long long)pools[i].surplus);
    kvc_cgroup_info_t cg;
    kvc_cgroup_info(&cg);
    printf("\ncgroup:");
    if (cg.version == 0) {
        printf(" none found\n");
        return;
    }
    printf(" v%d %s\n", cg.version, cg.memory_path);
    if (cg.memory_limit >= 0) printf("  memory limit %.2f GiB", (double)cg.memory_limit / (1u << 30));
    else printf("  memory limit none");
    if (cg.memory_usage >= 0) printf(", %.2f GiB used", (double)cg.memory_usage / (1u << 30));
    printf("\n  cpuset cpus %s, mems %s\n", cg.cpuset_cpus[0] ? cg.cpuset_cpus : "(unknown)",
           cg.cpuset_mems[0] ? cg.cpuset_mems : "(unknown)");
}

static void print_memory_json(json_writer_t *w)
{
    kvc_hugepage_pool_t pools[8];
    const int n = kvc_hugepage_pools(pools, 8);
    json_string(w, "transparent_hugepages", kvc_thp_mode_name(kvc_thp_mode()));
    json_begin_array(w, "hugepage_pools");
    for (int i = 0; i < n && i < 8; i++) {
        json_begin_object(w, NULL);
        json_int(w, "page_size", (long long)pools[i].page_size);
        json_int(w, "total", (long long)pools[i].total);
        json_int(w, "free", (long long)pools[i].free);
        json_int(w, "reserved", (long long)pools[i].reserved);
        json_int(w, "surplus", (long long)pools[i].surplus);
        json_end_object(w);
    }
    json_end_array(w);
    kvc_cgroup_info_t cg;
    kvc_cgroup_info(&cg);
    json_begin_object(w, "cgroup");
    json_int(w, "version", cg.version);
    json_string(w, "memory_path", cg.memory_path);
    if (cg.memory_limit >= 0) json_int(w, "memory_limit", cg.memory_limit);
    else json_null(w, "memory_limit");
    if (cg.memory_usage >= 0) json_int(w, "memory_usage", cg.memory_usage);
    else json_null(w, "memory_usage");
    json_string(w, "cpuset_cpus", cg.cpuset_cpus);
    json_string(w, "cpuset_mems", cg.cpuset_mems);
    json_end_object(w);
}

static void print_text(kvc_context_t *ctx)
{
    printf("kvcore %s (library %s)\n\n", KVC_VERSION_STRING, kvc_version_string());
    printf("build:\n");
    const char *cfg = kvc_build_config();
    while (*cfg) {
        const char *nl = strchr(cfg, '\n');
        int n = nl ? (int)(nl - cfg) : (int)strlen(cfg);
        printf("  %.*s\n", n, cfg);
        cfg += n + (nl ? 1 : 0);
    }
    printf("\nbackends:\n");
    for (int i = 0; i < kvc_context_backend_count(ctx); i++) {
        kvc_backend_info_t b;
        kvc_context_backend_info(ctx, i, &b);
        printf("  %-5s %-9s prio %-3d devices %-2d %s\n", b.name, b.selected ? "SELECTED" : "", b.priority,
               b.num_devices, b.reason);
        /* A module that was not found has no origin to show (the reason lists where it was sought). */
        if (!strcmp(b.origin, "built-in") || access(b.origin, R_OK) == 0) printf("        from %s\n", b.origin);
    }
    printf("\ncpu: isa %s, %d threads\n", kvc_context_isa(ctx), kvc_context_num_threads(ctx));
    kvc_llc_info_t llc;
    if (kvc_llc_info(&llc) == KVC_OK) {
        /* The size used and where it came from; the other source's figure only where it differs. */
        const char *src = kvc_llc_source_name(llc.source);
        const int from_sysfs = !strcmp(src, "sysfs");
        const int64_t other = from_sysfs ? llc.cpuid_bytes : llc.sysfs_bytes;
        printf("  last-level cache %.1f MiB (from %s", (double)llc.bytes / (1 << 20), src);
        if (other > 0 && other != llc.bytes)
            printf("; %s says %.1f MiB", from_sysfs ? "CPUID" : "sysfs", (double)other / (1 << 20));
        printf("): transfers over %.1f MiB stream\n", (double)kvc_context_stream_min_bytes(ctx) / (1 << 20));
    }
    printf("\nnuma nodes%s:\n", kvc_topology_is_synthetic(ctx) ? " (topology from XML)" : "");
    for (int i = 0; i < kvc_topology_numa_count(ctx); i++) {
        kvc_numa_node_info_t n;
        kvc_topology_numa_node(ctx, i, &n);
        printf("  node %u: %.1f GiB", n.os_index, (double)n.total_bytes / (1u << 30));
        if (n.free_bytes >= 0) printf(" (%.1f GiB free)", (double)n.free_bytes / (1u << 30));
        printf(", %d cpus\n", n.num_cpus);
    }
    print_memory_text();
    printf("\ngpus on the PCI bus:\n");
    if (kvc_topology_gpu_count(ctx) == 0) printf("  none\n");
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        kvc_topology_gpu(ctx, i, &g);
        printf("  %s [%04x:%04x] class %04x numa node %d\n", g.bus_id, g.vendor_id, g.device_id, g.class_id, g.numa_node);
    }
    printf("\nenvironment:\n");
    int width = 0; /* the longest knob name: one column for all */
    for (size_t i = 0; i < kvc_env_knob_count(); i++) {
        kvc_env_knob_t k;
        kvc_env_knob_get(i, &k);
        if ((int)strlen(k.name) > width) width = (int)strlen(k.name);
    }
    for (size_t i = 0; i < kvc_env_knob_count(); i++) {
        kvc_env_knob_t k;
        kvc_env_knob_get(i, &k);
        printf("  %-*s = %-14s (default %s) %s\n", width, k.name, k.value ? k.value : "(unset)", k.default_value, k.help);
    }
}

static void print_json(kvc_context_t *ctx)
{
    json_writer_t w;
    json_init(&w, stdout, 1);
    json_begin_object(&w, NULL);
    json_string(&w, "version", kvc_version_string());
    json_begin_object(&w, "build");
    char cfg[2048];
    snprintf(cfg, sizeof(cfg), "%s", kvc_build_config());
    for (char *line = strtok(cfg, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        json_string(&w, line, eq + 1);
    }
    json_end_object(&w);
    json_string(&w, "selected_backend", kvc_context_backend_name(ctx));
    json_begin_array(&w, "backends");
    for (int i = 0; i < kvc_context_backend_count(ctx); i++) {
        kvc_backend_info_t b;
        kvc_context_backend_info(ctx, i, &b);
        json_begin_object(&w, NULL);
        json_string(&w, "name", b.name);
        json_string(&w, "origin", b.origin);
        json_int(&w, "priority", b.priority);
        json_bool(&w, "built", b.built);
        json_bool(&w, "loaded", b.loaded);
        json_int(&w, "devices", b.num_devices);
        json_bool(&w, "selected", b.selected);
        json_string(&w, "reason", b.reason);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_begin_object(&w, "cpu");
    json_string(&w, "isa", kvc_context_isa(ctx));
    json_int(&w, "threads", kvc_context_num_threads(ctx));
    kvc_llc_info_t llc_j;
    if (kvc_llc_info(&llc_j) == KVC_OK) {
        json_int(&w, "llc_bytes", llc_j.bytes);
        json_string(&w, "llc_source", kvc_llc_source_name(llc_j.source));
        json_int(&w, "llc_sysfs_bytes", llc_j.sysfs_bytes);
        json_int(&w, "llc_cpuid_bytes", llc_j.cpuid_bytes);
    }
    json_int(&w, "stream_min_bytes", kvc_context_stream_min_bytes(ctx));
    json_end_object(&w);
    json_bool(&w, "topology_from_xml", kvc_topology_is_synthetic(ctx));
    json_begin_array(&w, "numa_nodes");
    for (int i = 0; i < kvc_topology_numa_count(ctx); i++) {
        kvc_numa_node_info_t n;
        kvc_topology_numa_node(ctx, i, &n);
        json_begin_object(&w, NULL);
        json_int(&w, "os_index", n.os_index);
        json_int(&w, "bytes", (long long)n.total_bytes);
        json_int(&w, "cpus", n.num_cpus);
        if (n.free_bytes >= 0) json_int(&w, "free_bytes", n.free_bytes);
        else json_null(&w, "free_bytes");
        json_end_object(&w);
    }
    json_end_array(&w);
    print_memory_json(&w);
    json_begin_array(&w, "gpus");
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        kvc_topology_gpu(ctx, i, &g);
        char id[16];
        json_begin_object(&w, NULL);
        json_string(&w, "bus_id", g.bus_id);
        snprintf(id, sizeof(id), "%04x:%04x", g.vendor_id, g.device_id);
        json_string(&w, "pci_id", id);
        json_int(&w, "class", g.class_id);
        json_int(&w, "numa_node", g.numa_node);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_begin_array(&w, "environment");
    for (size_t i = 0; i < kvc_env_knob_count(); i++) {
        kvc_env_knob_t k;
        kvc_env_knob_get(i, &k);
        json_begin_object(&w, NULL);
        json_string(&w, "name", k.name);
        json_string(&w, "value", k.value);
        json_string(&w, "default", k.default_value);
        json_string(&w, "help", k.help);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}

static void info_help(void)
{
    printf("usage: kvcore info [OPTIONS]\n"
           "What this build and this machine offer: version, build options, backends, devices, CPU ISA, NUMA\n"
           "nodes, hugepages, cgroup limits, environment knobs.\n"
           "  --json  one JSON object on stdout\n"
           "  --all   also open every built GPU module, even without a matching device, to show that it loads\n"
           "          and what its probe says\n"
           "  -q      only the version line\n");
}

int kvc_cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        { "json", no_argument, NULL, 'J' },
        { "all", no_argument, NULL, 'A' },
        { NULL, 0, NULL, 0 },
    };
    int as_json = 0, all = 0, c;
    cli_common_t com = { 0 };
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT, longopts, NULL)) != -1) {
        if (c == 'J') as_json = 1;
        else if (c == 'A') all = 1;
        else {
            int r = cli_common_option("info", c, argv, &com, info_help);
            if (r >= 0) return r;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvcore info: unexpected argument '%s' (see kvcore info --help)\n", argv[optind]);
        return 2;
    }
    if (com.quiet && as_json) {
        fprintf(stderr, "kvcore info: -q and --json together: choose one\n");
        return 2;
    }
    if (com.quiet) {
        printf("kvcore %s (library %s)\n", KVC_VERSION_STRING, kvc_version_string());
        return 0;
    }
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_LOAD_ALL, .load_all_modules = all };
    kvc_context_t *ctx;
    kvc_status_t st = kvc_context_create(&p, &ctx);
    if (st != KVC_OK) {
        fprintf(stderr, "kvcore info: %s: %s\n", kvc_status_string(st), kvc_last_error());
        return 1;
    }
    if (as_json) print_json(ctx);
    else print_text(ctx);
    kvc_context_destroy(ctx);
    return 0;
}
