/* kvcore info [--json] [--all]: what this build and this machine offer. */
#include <stdio.h>
#include <string.h>

#include <kvcore.h>

#include "cli.h"
#include "json.h"

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
        printf("  %-5s %-9s prio %-3d devices %-2d %s\n        from %s\n", b.name, b.selected ? "SELECTED" : "", b.priority,
               b.num_devices, b.reason, b.origin);
    }
    printf("\ncpu: isa %s, %d threads\n", kvc_context_isa(ctx), kvc_context_num_threads(ctx));
    printf("\nnuma nodes%s:\n", kvc_topology_is_synthetic(ctx) ? " (topology from XML)" : "");
    for (int i = 0; i < kvc_topology_numa_count(ctx); i++) {
        kvc_numa_node_info_t n;
        kvc_topology_numa_node(ctx, i, &n);
        printf("  node %u: %.1f GiB, %d cpus\n", n.os_index, (double)n.total_bytes / (1u << 30), n.num_cpus);
    }
    printf("\ngpus on the PCI bus:\n");
    if (kvc_topology_gpu_count(ctx) == 0) printf("  none\n");
    for (int i = 0; i < kvc_topology_gpu_count(ctx); i++) {
        kvc_pci_device_t g;
        kvc_topology_gpu(ctx, i, &g);
        printf("  %s [%04x:%04x] class %04x numa node %d\n", g.bus_id, g.vendor_id, g.device_id, g.class_id, g.numa_node);
    }
    printf("\nenvironment:\n");
    for (size_t i = 0; i < kvc_env_knob_count(); i++) {
        kvc_env_knob_t k;
        kvc_env_knob_get(i, &k);
        printf("  %-20s = %-14s (default %s) %s\n", k.name, k.value ? k.value : "(unset)", k.default_value, k.help);
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
        json_end_object(&w);
    }
    json_end_array(&w);
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

int kvc_cmd_info(int argc, char **argv)
{
    int as_json = 0, all = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: kvcore info [--json] [--all]\n  --all  also open every built GPU module, even without a "
                   "matching device, to show that it loads and what its probe says\n");
            return 0;
        } else {
            fprintf(stderr, "kvcore info: unknown option '%s'\n", argv[i]);
            return 2;
        }
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
