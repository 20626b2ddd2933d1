/* SPDX-License-Identifier: BSD-3-Clause */
/* The kvcore command-line tool: one function per subcommand. */
#ifndef KVC_CLI_H
#define KVC_CLI_H

typedef struct kvc_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
} kvc_cli_command_t;

int kvc_cmd_info(int argc, char **argv);
int kvc_cmd_bench(int argc, char **argv);
int kvc_cmd_encode(int argc, char **argv);
int kvc_cmd_decode(int argc, char **argv);
int kvc_cmd_inspect(int argc, char **argv);
int kvc_cmd_demo(int argc, char **argv);

#endif
