/* Small helpers shared by the CLI commands. */
#ifndef KVC_CLI_UTIL_H
#define KVC_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore.h>

/* Read a whole file (malloc'ed); prints an error and returns NULL on failure. */
uint8_t *cli_read_file(const char *path, size_t *len);
/* Write a whole file atomically (temp file + rename); 0 on success, prints an error otherwise. */
int cli_write_file(const char *path, const void *buf, size_t len);
/* Monotonic seconds. */
double cli_now(void);
/* A one-line progress bar on stderr, drawn only when stderr is a terminal. */
void cli_progress(void *label, size_t done, size_t total);
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

#endif
