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

static int progress_mode = -1; /* -1: when stderr is a terminal; 0 never; 1 always */

void cli_progress_mode(int mode) { progress_mode = mode; }

static int progress_on(void) { return progress_mode > 0 || (progress_mode < 0 && isatty(STDERR_FILENO)); }

void cli_progress_begin(cli_progress_t *p, const char *name, size_t bytes)
{
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->bytes = (double)bytes;
    p->t0 = cli_now();
}

const char *cli_human(double bytes, char buf[16])
{
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, u++;
    snprintf(buf, 16, u == 0 ? "%.0f %s" : bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

void cli_progress(void *user, size_t done, size_t total)
{
    const cli_progress_t *p = user;
    if (!progress_on() || total == 0) return;
    const double frac = (double)done / (double)total, dt = cli_now() - p->t0, rate = dt > 0 ? frac * p->bytes / dt : 0;
    char d[16], t[16], r[16], eta[48] = "";
    if (frac > 0 && frac < 1 && dt > 0) {
        const long left = (long)(dt / frac - dt + 0.5);
        snprintf(eta, sizeof(eta), " ETA %ld:%02ld", left / 60, left % 60);
    }
    fprintf(stderr, "\r%.40s: %s / %s %3.0f%%, %s/s%s\033[K", p->name, cli_human(frac * p->bytes, d), cli_human(p->bytes, t),
            100.0 * frac, cli_human(rate, r), eta);
    fflush(stderr);
}

void cli_progress_end(void)
{
    if (progress_on()) fputs("\r\033[K", stderr);
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
