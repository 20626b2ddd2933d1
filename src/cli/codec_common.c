/* SPDX-License-Identifier: BSD-3-Clause */
/* What kvcore encode, decode and inspect share (codec_common.h). */
#include "codec_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "util.h"

kvc_context_t *cli_open_context(const char *cmd)
{
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(NULL, &ctx);
    if (st != KVC_OK) {
        cli_fail(cmd, st);
        return NULL;
    }
    return ctx;
}

const char *cli_layout_name(const kvc_codec_info_t *info) { return info->layout == KVC_CODEC_MLA ? "MLA" : "KV_2LTD"; }

const char *cli_coder_name(const kvc_codec_info_t *info) { return info->coder == KVC_CODER_RANS ? "rans" : "ac"; }

void cli_json_chunk_shape(json_writer_t *w, const kvc_codec_info_t *info)
{
    json_string(w, "dtype", kvc_dtype_name(info->dtype));
    json_string(w, "layout", cli_layout_name(info));
    json_int(w, "layers", (long long)info->num_layers);
    json_int(w, "tokens", (long long)info->num_tokens);
    json_int(w, "heads", (long long)info->num_heads);
    json_int(w, "head_size", (long long)info->head_size);
    json_bool(w, "heads_known", info->heads_known);
    json_string(w, "coder", cli_coder_name(info));
}

FILE *cli_summary_stream(const char *out) { return strcmp(out, "-") ? stdout : stderr; }

const char *cli_size_line(size_t from, size_t to, size_t raw, double seconds)
{
    static char line[128];
    char a[16], b[16], r[16];
    snprintf(line, sizeof(line), "%s => %s (%.2fx) in %.*f s, %s/s", cli_human((double)from, a), cli_human((double)to, b),
             from > to ? (double)from / (double)to : (double)to / (double)from, seconds < 10 ? 2 : 1, seconds,
             cli_human(seconds > 0 ? (double)raw / seconds : 0, r));
    return line;
}

int cli_count_stdin(const char *const *in, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) k += !strcmp(in[i], "-");
    return k;
}

/* Several inputs to one directory (created when named with a final '/' and absent), or each
 * beside itself (dir NULL: no -o): each gets DIR/STEM.ext; two inputs with one output is an error. */
static int plan_outputs(const char *cmd, const char *dir, const char *const *in, int n, const char *ext, char **outs)
{
    struct stat sb;
    if (dir && stat(dir, &sb) != 0 && mkdir(dir, 0777) != 0) {
        fprintf(stderr, "kvcore %s: cannot create the directory %s: %s\n", cmd, dir, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    for (int i = 0; i < n; i++) {
        if (!strcmp(in[i], "-")) {
            if (dir) fprintf(stderr, "kvcore %s: standard input has no name to derive an output name in %s from; give -o FILE\n", cmd, dir);
            else fprintf(stderr, "kvcore %s: standard input among several inputs has no name to derive an output name from; give it alone (its output goes to standard output) or with -o FILE\n", cmd);
            return CLI_EXIT_USAGE;
        }
        if (!(outs[i] = dir ? cli_output_in_dir(dir, in[i], ext) : cli_output_beside(in[i], ext))) {
            fprintf(stderr, "kvcore %s: out of memory\n", cmd);
            return CLI_EXIT_ERROR;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(outs[i], outs[j])) {
                fprintf(stderr, "kvcore %s: %s and %s would both be written to %s\n", cmd, in[j], in[i], outs[i]);
                return CLI_EXIT_USAGE;
            }
    }
    return 0;
}

int cli_plan(const char *cmd, const char *out, int to_stdout, const char *const *in, int nin, const char *ext,
             cli_outputs_t *p)
{
    memset(p, 0, sizeof(*p));
    if (to_stdout && out && strcmp(out, "-")) {
        fprintf(stderr, "kvcore %s: -c (standard output) and -o %s contradict each other\n", cmd, out);
        return CLI_EXIT_USAGE;
    }
    if (to_stdout || (!out && nin == 1 && !strcmp(in[0], "-"))) out = "-";
    if (out && (!strcmp(out, "-") || !cli_is_dir(out))) {
        p->out = out;
        return 0;
    }
    p->dir = out;
    p->label = out ? out : "kvcore";
    if (!(p->outs = calloc((size_t)nin, sizeof(char *)))) {
        fprintf(stderr, "kvcore %s: out of memory\n", cmd);
        return CLI_EXIT_ERROR;
    }
    int rc = plan_outputs(cmd, p->dir, in, nin, ext, p->outs);
    if (!rc && !p->dir && nin == 1) p->out = p->outs[0]; /* one input, no -o: an ordinary single output */
    else p->many = 1;
    return rc;
}

const char *cli_skipped_text(int skipped)
{
    static char t[32];
    if (skipped) snprintf(t, sizeof(t), ", %d skipped", skipped);
    else t[0] = '\0';
    return t;
}

void cli_plan_free(cli_outputs_t *p, int nin)
{
    for (int i = 0; p->outs && i < nin; i++) free(p->outs[i]);
    free(p->outs);
}

int cli_output_option(int c, const char *arg, cli_output_opts_t *o)
{
    switch (c) {
    case 'o': o->out = arg; break;
    case 'c': o->to_stdout = 1; break;
    case 'f': o->force = 1; break;
    case 'J': o->as_json = 1; break;
    case CLI_OPT_PROGRESS:
    case CLI_OPT_NO_PROGRESS: cli_progress_mode(c == CLI_OPT_PROGRESS); break;
    default: return 0;
    }
    return 1;
}

/* ---- streams: a file of several containers (kvcore encode --chunk-tokens) */

int cli_src_pread(const cli_stream_src_t *s, void *buf, size_t n, uint64_t off)
{
    if (off > s->size || n > s->size - off) return 0;
    if (s->fd < 0) {
        memcpy(buf, s->data + off, n);
        return 1;
    }
    return pread(s->fd, buf, n, (off_t)off) == (ssize_t)n;
}

size_t cli_stream_tokens(const cli_stream_src_t *s, cli_stream_walk_t *w)
{
    uint64_t off = 0, T = 0;
    uint8_t h[KVC_CONTAINER_PROBE_BYTES];
    memset(w, 0, sizeof(*w));
    for (; off < s->size; w->stop = off, w->chunks++) {
        const size_t n = s->size - off < sizeof(h) ? (size_t)(s->size - off) : sizeof(h);
        kvc_container_info_t ci;
        if (!cli_src_pread(s, h, n, off)) return 0;
        const kvc_status_t st = kvc_container_probe(h, n, &ci);
        if (ci.kind == KVC_CONTAINER_NONE || n < KVC_CONTAINER_HEADER_BYTES ||
            (ci.kind != KVC_CONTAINER_INVALID && ci.container_bytes > s->size - off))
            return 0;
        if (st != KVC_OK) {
            w->st = st;
            w->bytes = ci.container_bytes;
            return 0;
        }
        T += ci.num_tokens;
        off += ci.container_bytes;
    }
    return (size_t)T;
}

int cli_stream_stopped(const char *cmd, const char *in_path, const cli_stream_walk_t *w, uint64_t size)
{
    if (w->st == KVC_OK)
        fprintf(stderr, "kvcore %s: %s: %s: after %llu bytes of whole containers, %llu bytes that are not a whole "
                        "container (trailing data, or a container cut short)\n", cmd, kvc_status_string(KVC_ERR_CORRUPT),
                in_path, (unsigned long long)w->stop, (unsigned long long)(size - w->stop));
    else if (strcmp(cmd, "inspect")) cli_fail(cmd, w->st);
    else if (w->bytes)
        fprintf(stderr, "kvcore %s: %s: %s: chunk %zu (bytes %llu to %llu): %s\n", cmd, kvc_status_string(w->st), in_path,
                w->chunks, (unsigned long long)w->stop, (unsigned long long)(w->stop + w->bytes), kvc_last_error());
    else
        fprintf(stderr, "kvcore %s: %s: %s: chunk %zu (from byte %llu): %s\n", cmd, kvc_status_string(w->st), in_path,
                w->chunks, (unsigned long long)w->stop, kvc_last_error());
    return CLI_EXIT_ERROR;
}
