/* SPDX-License-Identifier: BSD-3-Clause */
/* Small helpers shared by the CLI commands. */
#ifndef KVC_CLI_UTIL_H
#define KVC_CLI_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <kvcore.h>

/* Monotonic seconds. */
double cli_now(void);
/* A one-line progress report on stderr, redrawn in place: the file, bytes done / total, %, rate
 * and time left ("kv.npy: 120 MiB / 512 MiB  23%, 26.7 MiB/s ETA 0:14"). Drawn when stderr is a
 * terminal, or always / never after cli_progress_mode(1 / 0) (--progress / --no-progress).
 * cli_progress is a kvc_codec_progress_fn: user is a cli_progress_t, done/total any unit (the
 * fraction is applied to the byte count given to cli_progress_begin). cli_progress_end clears it. */
typedef struct {
    char name[64];
    double bytes, t0;
} cli_progress_t;
void cli_progress_mode(int mode);
void cli_progress_begin(cli_progress_t *p, const char *name, size_t bytes);
void cli_progress(void *user, size_t done, size_t total);
void cli_progress_end(void);
/* bytes in binary units for people: "512 MiB", "95.3 KiB", "7.50 GiB" (buf: 16 bytes). */
const char *cli_human(double bytes, char buf[16]);
/* Print "kvcore CMD: <status text>: <detail>" for a failed call and return 1. */
int cli_fail(const char *cmd, kvc_status_t st);
/* Parse a positive size_t option value; prints an error and returns 0 when malformed. */
int cli_parse_size(const char *cmd, const char *opt, const char *v, size_t *out);
/* Element value as double (f16, bf16, f32). */
double cli_elem(const void *base, size_t i, kvc_dtype_t dt);

/* Reconstruction error of a decoded chunk against the original, per (plane, layer). */
typedef struct {
    double max_abs;  /* max |x - x^| */
    double rel_rms;  /* sqrt(sum (x - x^)^2 / sum x^2) */
} cli_err_t;
void cli_error_stats(const void *orig, const void *dec, kvc_dtype_t dt, size_t planes_layers, size_t per_layer,
                     cli_err_t *out);

/* Options every command takes: -h/--help, -V/--version, -q/--quiet, -v/--verbose. */
typedef struct {
    int quiet, verbose;
} cli_common_t;
#define CLI_COMMON_SHORT ":hVqv"
#define CLI_COMMON_LONG                                                                                     \
    { "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' },                              \
        { "quiet", no_argument, NULL, 'q' }, { "verbose", no_argument, NULL, 'v' }
/* Handle a getopt_long result that is not the command's own: -1 to go on parsing, else the exit
 * status (0 after --help / --version, 2 for an unknown option or a missing value). */
int cli_common_option(const char *cmd, int c, char **argv, cli_common_t *o, void (*help)(void));
/* Common options and exit statuses, for --help. */
void cli_usage_footer(FILE *f);

#endif
