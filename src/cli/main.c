/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore: command-line entry point and subcommand table. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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
    fprintf(f, "usage: kvcore COMMAND [OPTIONS]\n       kvcore -V|--version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'kvcore COMMAND --help' describes each command. Every command takes -h/--help, -V/--version,\n"
               "-q/--quiet and -v/--verbose. Outputs are never overwritten without -f/--force, never replace an\n"
               "input, and appear only when complete ('-' is standard input / output where a command reads or\n"
               "writes a file).\n"
               "exit status: 0 success, 1 data or I/O error (an existing output is left as it was), 2 usage error\n"
               "kvcore %s\n", kvc_version_string());
}

/* The library ignores a malformed KVCORE_NUM_THREADS (the default is used): say so here. */
static int check_env(void)
{
    const char *v = getenv("KVCORE_NUM_THREADS");
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end || errno || n <= 0 || n > INT_MAX) {
        fprintf(stderr, "kvcore: KVCORE_NUM_THREADS='%s' is not a positive number of threads (unset it for the default)\n", v);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("kvcore %s\n", kvc_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) return check_env() ? 2 : commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kvcore: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
