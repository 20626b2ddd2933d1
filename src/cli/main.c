/* kvcore: command-line entry point and subcommand table. */
#include <stdio.h>
#include <string.h>

#include <kvcore.h>

#include "cli.h"

static const kvc_cli_command_t commands[] = {
    { "info", "version, build options, backends, devices, CPU ISA, NUMA nodes, environment knobs", kvc_cmd_info },
    { "demo", "the main job: real KV caches through paged cache -> chunks -> CacheGen -> back, verified", kvc_cmd_demo },
    { "encode", "CacheGen-compress a KV cache (.npy / .safetensors) into a .kvc container", kvc_cmd_encode },
    { "decode", "restore a .kvc container to .npy / .safetensors", kvc_cmd_decode },
    { "inspect", "header, sizes, bits/symbol vs entropy per layer, error vs the original", kvc_cmd_inspect },
    { "bench", "throughput of each op next to a baseline measured in the same run (--json)", kvc_cmd_bench },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kvcore COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'kvcore COMMAND --help' describes each command. kvcore %s\n", kvc_version_string());
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kvcore %s\n", kvc_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kvcore: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
