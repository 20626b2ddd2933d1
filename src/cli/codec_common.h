/* SPDX-License-Identifier: BSD-3-Clause */
/* What kvcore encode, decode and inspect share (cmd_encode.c, cmd_decode.c, cmd_inspect.c): the
 * context, a chunk's names and JSON fields, the summary's size line, where the outputs go, the
 * output options of encode and decode, and the walk over a stream's containers. */
#ifndef KVC_CLI_CODEC_COMMON_H
#define KVC_CLI_CODEC_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kvcore.h>

#include "json.h"

/* A CPU context for the command; prints the error and returns NULL when there is none. */
kvc_context_t *cli_open_context(const char *cmd);

/* The chunk a container holds: its layout's and coder's names, and as JSON fields (decode and
 * inspect). */
const char *cli_layout_name(const kvc_codec_info_t *info);
const char *cli_coder_name(const kvc_codec_info_t *info);
void cli_json_chunk_shape(json_writer_t *w, const kvc_codec_info_t *info);

/* Where the summary goes: standard output, unless the data does. */
FILE *cli_summary_stream(const char *out);
/* "512 MiB => 109 MiB (4.68x) in 19.2 s, 26.7 MiB/s": sizes and the rate (of the uncompressed
 * side, raw) for people; --json keeps the exact numbers. A static buffer. */
const char *cli_size_line(size_t from, size_t to, size_t raw, double seconds);
/* How many of the n inputs are standard input ("-"). */
int cli_count_stdin(const char *const *in, int n);

/* ---- the output plan of encode and decode */

/* Where the outputs go, as zstd decides it: -o FILE, -o DIR/ (each input becomes DIR/STEM.ext),
 * -c or -o - (standard output), or no -o: standard input to standard output, each named input
 * beside itself (kv.npy -> kv.kvc). */
typedef struct {
    const char *out;  /* the one output (a path or "-"), or NULL when each input has its own */
    const char *dir;  /* -o DIR/ */
    char **outs;      /* [nin]: each input's output when out is NULL */
    int many;         /* outs is used: a batch, where an input whose output cannot be written is skipped */
    const char *label; /* the batch summary's subject */
} cli_outputs_t;
/* Fill p from -o (out), -c (to_stdout) and the inputs; each derived name ends in ext. Several
 * inputs to one directory (created when named with a final '/' and absent), or each beside itself
 * (no -o): each gets DIR/STEM.ext; two inputs with one output is an error. Prints the error and
 * returns the exit status, or 0. cli_plan_free after either. */
int cli_plan(const char *cmd, const char *out, int to_stdout, const char *const *in, int nin, const char *ext,
             cli_outputs_t *p);
void cli_plan_free(cli_outputs_t *p, int nin);
/* ", N skipped" for a batch summary ("" when none; a static buffer). */
const char *cli_skipped_text(int skipped);

/* The options encode and decode share, as getopt_long sees them: -o/--output, -c/--stdout,
 * -f/--force, --json, --progress / --no-progress (long codes clear of each command's own). */
enum { CLI_OPT_PROGRESS = 1100, CLI_OPT_NO_PROGRESS };
#define CLI_OUTPUT_SHORT "o:fc"
#define CLI_OUTPUT_LONG                                                                                                \
    { "output", required_argument, NULL, 'o' }, { "stdout", no_argument, NULL, 'c' },                                 \
        { "force", no_argument, NULL, 'f' }, { "json", no_argument, NULL, 'J' },                                      \
        { "progress", no_argument, NULL, CLI_OPT_PROGRESS }, { "no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS }
typedef struct {
    const char *out; /* -o, or NULL */
    int to_stdout, force, as_json;
} cli_output_opts_t;
/* Take getopt_long's result c (arg: its optarg) when it is one of those: 1, else 0. */
int cli_output_option(int c, const char *arg, cli_output_opts_t *o);

/* ---- streams: a file of several containers (kvcore encode --chunk-tokens) */

/* Where a stream's bytes are: a regular file (read in place with pread, so memory holds a few
 * chunks whatever its size) or memory (standard input, a pipe, a device: read fully first). */
typedef struct {
    int fd;              /* -1: data */
    const uint8_t *data;
    uint64_t size, pos;  /* pos: the sequential reader's position */
} cli_stream_src_t;
/* n bytes at off, all of them (1) or not (0). */
int cli_src_pread(const cli_stream_src_t *s, void *buf, size_t n, uint64_t off);

/* Where a walk over a stream's headers stopped: at byte stop, after `chunks` whole containers;
 * st KVC_OK: a cut container or trailing bytes, else the probe's status for a damaged header or
 * META (its message in kvc_last_error) and bytes that container's size when its header says it. */
typedef struct {
    uint64_t stop, bytes;
    size_t chunks;
    kvc_status_t st;
} cli_stream_walk_t;
/* The whole stream's token count, from each container's META (kvc_container_probe), so the .npy
 * header can be written first; 0 when the walk did not reach the end cleanly (*w says where and
 * why). Damage the probe does not see is left to the decoder to report. */
size_t cli_stream_tokens(const cli_stream_src_t *s, cli_stream_walk_t *w);
/* A walk that stopped: "corrupt ...: IN: after N bytes of whole containers, M bytes that are not
 * one (...)", or the damaged container's error (inspect: with its chunk and bytes, as its loop
 * over the chunks says it). */
int cli_stream_stopped(const char *cmd, const char *in_path, const cli_stream_walk_t *w, uint64_t size);

#endif
