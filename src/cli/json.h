/* SPDX-License-Identifier: BSD-3-Clause */
/* Minimal JSON writer for the CLI's --json output (one object per line for bench suites). */
#ifndef KVC_CLI_JSON_H
#define KVC_CLI_JSON_H

#include <stdio.h>

typedef struct json_writer {
    FILE *f;
    int depth;
    int first[32]; /* per nesting level: nothing written yet */
    int pretty;
} json_writer_t;

void json_init(json_writer_t *w, FILE *f, int pretty);
void json_begin_object(json_writer_t *w, const char *key);
void json_end_object(json_writer_t *w);
void json_begin_array(json_writer_t *w, const char *key);
void json_end_array(json_writer_t *w);
void json_string(json_writer_t *w, const char *key, const char *value);
void json_int(json_writer_t *w, const char *key, long long value);
void json_double(json_writer_t *w, const char *key, double value);
void json_bool(json_writer_t *w, const char *key, int value);
void json_null(json_writer_t *w, const char *key);
/* Finish the document (newline). */
void json_finish(json_writer_t *w);

#endif
