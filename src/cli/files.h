/* SPDX-License-Identifier: BSD-3-Clause */
/* The CLI's files: input type by magic bytes, reading files and streams (standard input, pipes,
 * devices) with bounds, output checks (existing file, same file as an input, terminal), atomic
 * writes, and removal of temporaries on SIGINT/SIGTERM/SIGHUP. */
#ifndef KVC_CLI_FILES_H
#define KVC_CLI_FILES_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Exit statuses of every command (documented in --help and README). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_ERROR = 1, CLI_EXIT_USAGE = 2 };

typedef enum { CLI_FMT_UNKNOWN = 0, CLI_FMT_NPY, CLI_FMT_SAFETENSORS, CLI_FMT_KVC } cli_format_t;

/* What a file's first bytes say it is (n bytes available). */
cli_format_t cli_sniff(const uint8_t *head, size_t n);
const char *cli_format_name(cli_format_t f);

/* An input: a regular file named by path (read by the library in place), or a stream ("-", a
 * pipe, a device) read into memory. */
typedef struct {
    const char *path;  /* as given; "-" for standard input */
    const char *label; /* for messages: the path, or "standard input" */
    cli_format_t fmt;
    int stream;        /* 1: data/len hold the bytes */
    uint8_t *data;
    size_t len;
} cli_input_t;

/* How long an input FIFO may wait for its writer to open it before it is refused as empty. */
#define CLI_FIFO_WAIT_MS 3000

/* Open an input and detect its type. want_kvc: a container or a stream of them (from a pipe or
 * device: each container read only as far as its header declares, the next one while the bytes
 * that follow start one); else a tensor file (.npy / .safetensors). Prints the error; returns 0/1. */
int cli_input_open(const char *cmd, const char *path, int want_kvc, cli_input_t *in);
/* A container input read fully into memory (regular files too). */
int cli_input_load(const char *cmd, cli_input_t *in);
void cli_input_close(cli_input_t *in);
/* Do these bytes hold more than their first container (a stream, or a container with trailing
 * bytes, which the stream reader then rejects)? Decided from the bytes, whatever the input's type;
 * only the header (KVC_CONTAINER_HEADER_BYTES of data) is read, len is the input's whole length. */
int cli_kvc_is_stream(const uint8_t *data, size_t len);

/* Before any work: may `out` be written? Refuses an existing file without force, a directory, the
 * same file as one of the inputs (even with force), and binary data to a terminal. Prints the
 * error and returns CLI_EXIT_USAGE or CLI_EXIT_ERROR, or 0. */
int cli_check_output(const char *cmd, const char *out, int force, const char *const *inputs, int ninputs);

/* Is path a directory (existing, or ending in '/')? */
int cli_is_dir(const char *path);
/* DIR/BASENAME-without-extension + ext (malloc'ed). */
char *cli_output_in_dir(const char *dir, const char *input, const char *ext);
/* The input's own name with its extension replaced by ext, in its directory (malloc'ed): what a
 * command writes without -o, as zstd does (kv.npy -> kv.kvc). */
char *cli_output_beside(const char *input, const char *ext);

/* Write buf to path ("-": standard output) through PATH.tmp.PID.N renamed into place when
 * complete, removed on error and on a signal. Prints the error; returns 0/1. */
int cli_write_file(const char *cmd, const char *path, const void *buf, size_t len);
/* The same in pieces: open (0, or prints the error and returns 1), write any number of times (an
 * error is kept for finish), finish(failed = 1 drops the temporary); finish prints a write error. */
typedef struct {
    const char *cmd, *path;
    int fd, direct, err;
    char target[PATH_MAX];
} cli_out_t;
int cli_out_open(const char *cmd, const char *path, cli_out_t *o);
int cli_out_write(cli_out_t *o, const void *buf, size_t len);
int cli_out_finish(cli_out_t *o, int failed);
/* Write a whole buffer to standard output. */
int cli_write_stdout(const char *cmd, const void *buf, size_t len);

/* Handlers for SIGINT/SIGTERM/SIGHUP: remove the temporaries of writes in progress (the CLI's and
 * the library's), then die of the signal (exit status 128 + signal number). */
void cli_install_signal_handlers(void);

#endif
