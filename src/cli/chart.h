/* SPDX-License-Identifier: BSD-3-Clause */
/* Per-layer pictures for inspect and demo: a terminal bar chart and a standalone SVG of the coded
 * bits/symbol and (where the original is known) the relative RMS error of each (plane, layer). */
#ifndef KVC_CLI_CHART_H
#define KVC_CLI_CHART_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *plane; /* "K", "V" or "latent" */
    unsigned layer;
    double bits; /* coded bits per symbol */
    double err;  /* relative RMS error against the original (used when the chart has errors) */
} cli_chart_row_t;

/* --chart / --no-chart: 1 always, 0 never, -1 (default) when standard output is a terminal, so a
 * pipe gets the plain table only. */
int cli_chart_wanted(int mode);
/* The bar chart, one line per row: bars in eighths of a character with Unicode blocks when the
 * locale's character set is UTF-8, whole '#' otherwise; each column scaled to its largest value and
 * the whole chart as wide as $COLUMNS, else the terminal, else 80 columns. */
void cli_chart_print(FILE *f, const cli_chart_row_t *rows, size_t n, int have_err);
/* Before any work: may --svg path be written (cli_check_output's rules, and its directory exists and
 * is writable)? Prints the error; returns 0 or the exit status. */
int cli_chart_svg_check(const char *cmd, const char *path, int force, const char *const *inputs, int ninputs);
/* The same as an SVG document at path ("-": standard output), written as every output is (through a
 * temporary renamed into place). Prints the error; returns 0 or 1. */
int cli_chart_svg(const char *cmd, const char *path, const char *title, const cli_chart_row_t *rows, size_t n,
                  int have_err);

#endif
