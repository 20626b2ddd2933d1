/* SPDX-License-Identifier: BSD-3-Clause */
/* Minimal JSON writer: escapes strings, tracks commas per nesting level. */
#include "json.h"

#include <math.h>

void json_init(json_writer_t *w, FILE *f, int pretty)
{
    w->f = f;
    w->depth = 0;
    w->first[0] = 1;
    w->pretty = pretty;
}

static void put_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void key(json_writer_t *w, const char *k)
{
    if (!w->first[w->depth]) fputc(',', w->f);
    w->first[w->depth] = 0;
    if (w->pretty && w->depth > 0) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
    }
    if (k) {
        put_escaped(w->f, k);
        fputs(w->pretty ? ": " : ":", w->f);
    }
}

static void open_(json_writer_t *w, const char *k, char c)
{
    if (w->depth > 0 || k) key(w, k);
    fputc(c, w->f);
    if (w->depth < 31) w->depth++;
    w->first[w->depth] = 1;
}

static void close_(json_writer_t *w, char c)
{
    const int empty = w->first[w->depth];
    if (w->depth > 0) w->depth--;
    if (w->pretty && !empty) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
    }
    fputc(c, w->f);
}

void json_begin_object(json_writer_t *w, const char *k) { open_(w, k, '{'); }
void json_end_object(json_writer_t *w) { close_(w, '}'); }
void json_begin_array(json_writer_t *w, const char *k) { open_(w, k, '['); }
void json_end_array(json_writer_t *w) { close_(w, ']'); }

void json_string(json_writer_t *w, const char *k, const char *v)
{
    key(w, k);
    if (v) put_escaped(w->f, v);
    else fputs("null", w->f);
}

void json_int(json_writer_t *w, const char *k, long long v)
{
    key(w, k);
    fprintf(w->f, "%lld", v);
}

void json_double(json_writer_t *w, const char *k, double v)
{
    key(w, k);
    if (isfinite(v)) fprintf(w->f, "%.6g", v);
    else fputs("null", w->f);
}

void json_bool(json_writer_t *w, const char *k, int v)
{
    key(w, k);
    fputs(v ? "true" : "false", w->f);
}

void json_null(json_writer_t *w, const char *k)
{
    key(w, k);
    fputs("null", w->f);
}

void json_finish(json_writer_t *w) { fputc('\n', w->f); }
