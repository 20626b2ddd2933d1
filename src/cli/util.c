#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/half.h"

uint8_t *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvcore: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                fprintf(stderr, "kvcore: out of memory reading %s\n", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "kvcore: read error on %s\n", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cli_write_file(const char *path, const void *buf, size_t len)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "kvcore: cannot create %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    int bad = fwrite(buf, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        fprintf(stderr, "kvcore: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

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
    fprintf(stderr, "\r%-10s [%.*s%*s] %zu/%zu", (const char *)label, fill, "========================================",
            width - fill, "", done, total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
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
