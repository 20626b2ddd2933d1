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
/* A one-line progress bar on stderr, drawn only when stderr is a terminal, redrawn in place (also
 * across several files); cli_progress_end clears the line. */
void cli_progress(void *label, size_t done, size_t total);
void cli_progress_end(void);
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
