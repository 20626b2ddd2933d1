/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "chart.h"

#include <errno.h>
#include <langinfo.h>
#include <libgen.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "files.h"

int cli_chart_wanted(int mode) { return mode > 0 || (mode < 0 && isatty(STDOUT_FILENO)); }

/* The locale's character set (LC_CTYPE from the environment), without changing the program's. */
static int utf8_locale(void)
{
    const char *cur = setlocale(LC_CTYPE, NULL);
    char *saved = cur ? strdup(cur) : NULL;
    const char *set = setlocale(LC_CTYPE, "") ? nl_langinfo(CODESET) : "";
    const int utf8 = !strcasecmp(set, "UTF-8") || !strcasecmp(set, "utf8");
    setlocale(LC_CTYPE, saved ? saved : "C");
    free(saved);
    return utf8;
}

static int columns(void)
{
    const char *c = getenv("COLUMNS");
    char *end;
    const long n = c ? strtol(c, &end, 10) : 0;
    if (c && *c && !*end && n > 0 && n < 10000) return (int)n;
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

static double value(const cli_chart_row_t *r, int metric) { return metric ? r->err : r->bits; }

static double column_max(const cli_chart_row_t *rows, size_t n, int metric)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(value(&rows[i], metric)) && value(&rows[i], metric) > m) m = value(&rows[i], metric);
    return m;
}

/* A bar of v / max of width w characters, padded with spaces to w. */
static void bar(FILE *f, double v, double max, int w, int utf8)
{
    static const char *const part[8] = { "", "\u258f", "\u258e", "\u258d", "\u258c", "\u258b", "\u258a", "\u2589" };
    const double frac = max > 0 && isfinite(v) && v > 0 ? fmin(v / max, 1.0) : 0;
    const int unit = utf8 ? 8 : 1, len = (int)lround(frac * w * unit);
    for (int i = 0; i < len / unit; i++) fputs(utf8 ? "\u2588" : "#", f);
    int used = len / unit;
    if (len % unit) {
        fputs(part[len % unit], f);
        used++;
    }
    fprintf(f, "%*s", w - used, "");
}

/* A chart of k (1 or 2) columns, the metrics m[0..k-1] side by side, bars w characters wide. */
static void chart_panel(FILE *f, const cli_chart_row_t *rows, size_t n, const int *m, int k, int w, int utf8)
{
    static const char *const title[2] = { "bits/symbol", "relative RMS error" };
    fprintf(f, "%-10s %-*s", "", k > 1 ? w + 9 : 0, title[m[0]]);
    if (k > 1) fprintf(f, "   %s", title[m[1]]);
    fprintf(f, "\n");
    const double max[2] = { column_max(rows, n, m[0]), k > 1 ? column_max(rows, n, m[1]) : 0 };
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%-6s %3u ", rows[i].plane, rows[i].layer);
        for (int c = 0; c < k; c++) {
            if (c) fputs("   ", f);
            bar(f, value(&rows[i], m[c]), max[c], w, utf8);
            fprintf(f, m[c] ? " %8.6f" : " %8.4f", value(&rows[i], m[c]));
        }
        fprintf(f, "\n");
    }
}

/* Bar width for k columns in `cols` characters: "latent 12 " (11) + per column a bar and
 * " 12.3456" (9), columns 3 apart, one column spare. */
static int bar_width(int cols, int k) { return (cols - 1 - 11 - k * 9 - (k - 1) * 3) / k; }

void cli_chart_print(FILE *f, const cli_chart_row_t *rows, size_t n, int have_err)
{
    const int utf8 = utf8_locale(), cols = columns(), both[2] = { 0, 1 };
    if (have_err && bar_width(cols, 2) >= 10) {
        chart_panel(f, rows, n, both, 2, bar_width(cols, 2) > 60 ? 60 : bar_width(cols, 2), utf8);
        return;
    }
    /* One column; on a terminal too narrow for two (under 52 columns) the error panel goes below. */
    int w = bar_width(cols, 1);
    if (w < 4) w = 4;
    if (w > 60) w = 60;
    chart_panel(f, rows, n, &both[0], 1, w, utf8);
    if (have_err) {
        fprintf(f, "\n");
        chart_panel(f, rows, n, &both[1], 1, w, utf8);
    }
}

/* Text for an SVG attribute or element. */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

/* One panel: vertical bars per layer (the planes of a layer side by side), y axis from 0 to the
 * largest value with three ticks, axis titles. */
static void svg_panel(FILE *f, const cli_chart_row_t *rows, size_t n, int metric, double top, const char *ylabel,
                      const char *unit)
{
    const double left = 80, width = 640, height = 200, base = top + height;
    size_t nplanes = 0, nlayers = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(rows[i].plane, rows[i - 1].plane)) nplanes++;
        if (rows[i].layer + 1 > nlayers) nlayers = rows[i].layer + 1;
    }
    const double max = column_max(rows, n, metric), slot = width / (double)(nlayers ? nlayers : 1);
    const double bw = slot * 0.8 / (double)(nplanes ? nplanes : 1);
    static const char *const colour[3] = { "#3b6ea8", "#d9822b", "#5a9e4b" };
    fprintf(f, "<g class=\"panel\" data-metric=\"%s\">\n", metric ? "err" : "bits");
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", left, base, left + width, base);
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", left, top, left, base);
    for (int t = 0; t <= 2; t++) {
        const double y = base - height * t / 2.0;
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>", left - 4, y, left, y);
        fprintf(f, "<text class=\"tick\" x=\"%g\" y=\"%g\" text-anchor=\"end\">%.4g</text>\n", left - 6, y + 4, max * t / 2.0);
    }
    fprintf(f, "<text class=\"axis-label\" x=\"%g\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 %g %g)\">",
            left - 55, top + height / 2, left - 55, top + height / 2);
    xml_text(f, ylabel);
    fprintf(f, "</text>\n<text class=\"axis-label\" x=\"%g\" y=\"%g\" text-anchor=\"middle\">layer</text>\n",
            left + width / 2, base + 34);
    const size_t step = nlayers > 16 ? (nlayers + 15) / 16 : 1; /* at most 16 layer numbers */
    for (size_t l = 0; l < nlayers; l += step)
        fprintf(f, "<text class=\"tick\" x=\"%g\" y=\"%g\" text-anchor=\"middle\">%zu</text>\n",
                left + slot * ((double)l + 0.5), base + 16, l);
    size_t plane = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && strcmp(rows[i].plane, rows[i - 1].plane)) plane++;
        const double v = value(&rows[i], metric), frac = max > 0 && isfinite(v) && v > 0 ? fmin(v / max, 1) : 0;
        const double h = frac * height;
        fprintf(f, "<rect class=\"bar\" data-plane=\"%s\" data-layer=\"%u\" data-value=\"%.9g\" x=\"%.2f\" y=\"%.2f\" "
                   "width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>%s layer %u: %.6g %s</title></rect>\n",
                rows[i].plane, rows[i].layer, v, left + slot * (rows[i].layer + 0.1) + bw * (double)plane, base - h, bw, h,
                colour[plane % 3], rows[i].plane, rows[i].layer, v, unit);
    }
    /* legend: one swatch per plane */
    plane = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(rows[i].plane, rows[i - 1].plane)) continue;
        const double x = left + width - 90.0 * (double)(nplanes - plane);
        fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%g\" y=\"%g\">%s</text>\n", x,
                top - 14, colour[plane % 3], x + 14, top - 5, rows[i].plane);
        plane++;
    }
    fprintf(f, "</g>\n");
}

int cli_chart_svg_check(const char *cmd, const char *path, int force, const char *const *inputs, int ninputs)
{
    if (!strcmp(path, "-")) return 0;
    int rc = cli_check_output(cmd, path, force, inputs, ninputs);
    if (rc) return rc;
    char *copy = strdup(path);
    if (!copy) {
        fprintf(stderr, "kvcore %s: out of memory\n", cmd);
        return CLI_EXIT_ERROR;
    }
    if (access(dirname(copy), W_OK) != 0) {
        fprintf(stderr, "kvcore %s: cannot write --svg %s: %s\n", cmd, path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    free(copy);
    return rc;
}

int cli_chart_svg(const char *cmd, const char *path, const char *title, const cli_chart_row_t *rows, size_t n,
                  int have_err)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);
    if (!f) {
        fprintf(stderr, "kvcore %s: --svg %s: out of memory\n", cmd, path);
        return CLI_EXIT_ERROR;
    }
    const int panels = have_err ? 2 : 1, H = 60 + 270 * panels;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"%d\" viewBox=\"0 0 760 %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<title>",
            H, H);
    xml_text(f, title);
    fprintf(f, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text class=\"title\" x=\"380\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">");
    xml_text(f, title);
    fprintf(f, "</text>\n");
    svg_panel(f, rows, n, 0, 70, "coded bits per symbol", "bits/symbol");
    if (have_err) svg_panel(f, rows, n, 1, 340, "relative RMS error", "relative RMS error");
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0 || !doc) {
        free(doc);
        fprintf(stderr, "kvcore %s: --svg %s: out of memory\n", cmd, path);
        return CLI_EXIT_ERROR;
    }
    const int rc = cli_write_file(cmd, path, doc, len);
    free(doc);
    return rc;
}
