/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/half.h"

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress(void *label, size_t done, size_t total)
{
    if (!isatty(STDERR_FILENO) || total == 0) return;
    const int width = 40, fill = (int)((double)width * (double)done / (double)total);
    fprintf(stderr, "\r%-16s [%.*s%*s] %zu/%zu", (const char *)label, fill, "========================================",
            width - fill, "", done, total);
    fflush(stderr);
}

void cli_progress_end(void)
{
    if (isatty(STDERR_FILENO)) fputs("\r\033[K", stderr);
}

int cli_fail(const char *cmd, kvc_status_t st)
{
    fprintf(stderr, "kvcore %s: %s: %s\n", cmd, kvc_status_string(st), kvc_last_error());
    return 1;
}

int cli_parse_size(const char *cmd, const char *opt, const char *v, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || n == 0 || v[0] == '-') {
        fprintf(stderr, "kvcore %s: %s needs a positive integer, got '%s'\n", cmd, opt, v ? v : "");
        return 0;
    }
    *out = (size_t)n;
    return 1;
}

double cli_elem(const void *base, size_t i, kvc_dtype_t dt)
{
    if (dt == KVC_DTYPE_F32) return ((const float *)base)[i];
    const uint16_t h = ((const uint16_t *)base)[i];
    return dt == KVC_DTYPE_F16 ? kvc_f16_to_f32(h) : kvc_bf16_to_f32(h);
}

void cli_error_stats(const void *orig, const void *dec, kvc_dtype_t dt, size_t planes_layers, size_t per_layer,
                     cli_err_t *out)
{
    for (size_t l = 0; l < planes_layers; l++) {
        double max_abs = 0, se = 0, ss = 0;
        for (size_t i = l * per_layer; i < (l + 1) * per_layer; i++) {
            const double x = cli_elem(orig, i, dt), y = cli_elem(dec, i, dt), e = x - y;
            if (!isfinite(x)) continue;
            if (fabs(e) > max_abs) max_abs = fabs(e);
            se += e * e;
            ss += x * x;
        }
        out[l].max_abs = max_abs;
        out[l].rel_rms = ss > 0 ? sqrt(se / ss) : sqrt(se);
    }
}

void cli_usage_footer(FILE *f)
{
    fprintf(f, "\ncommon options:\n"
               "  -h, --help     this help and exit\n"
               "  -V, --version  print kvcore's version and exit\n"
               "  -q, --quiet    print nothing but errors and warnings\n"
               "  -v, --verbose  more detail (and the library's log at level info unless KVCORE_LOG_LEVEL is set)\n"
               "exit status: 0 success, 1 data or I/O error (an existing output is left as it was), 2 usage error\n");
}

int cli_common_option(const char *cmd, int c, char **argv, cli_common_t *o, void (*help)(void))
{
    switch (c) {
    case 'h':
        help();
        cli_usage_footer(stdout);
        return 0;
    case 'V':
        printf("kvcore %s\n", kvc_version_string());
        return 0;
    case 'q':
        o->quiet = 1;
        return -1;
    case 'v':
        o->verbose++;
        if (!getenv("KVCORE_LOG_LEVEL")) setenv("KVCORE_LOG_LEVEL", "info", 1);
        return -1;
    case ':':
        fprintf(stderr, "kvcore %s: %s needs a value (see kvcore %s --help)\n", cmd, argv[optind - 1], cmd);
        return 2;
    default:
        if (optopt) fprintf(stderr, "kvcore %s: unknown option '-%c' (see kvcore %s --help)\n", cmd, optopt, cmd);
        else fprintf(stderr, "kvcore %s: unknown option '%s' (see kvcore %s --help)\n", cmd, argv[optind - 1], cmd);
        return 2;
    }
}
