/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore decode: restore a container, or a stream of them (written into an .npy chunk by chunk),
 * as .npy / .safetensors. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvcore.h>

#include "cli.h"
#include "codec_common.h"
#include "files.h"
#include "json.h"
#include "util.h"

typedef struct {
    cli_common_t c;
    cli_output_opts_t w; /* -o, -c, -f, --json, --progress */
    int split, nfiles;
    cli_format_t fmt; /* CLI_FMT_UNKNOWN: from each output's name */
} decode_opts_t;

static void decode_help(void)
{
    printf("usage: kvcore decode [OPTIONS] IN.kvc [-o OUT.{npy,safetensors} | -c]\n"
           "       kvcore decode [OPTIONS] IN.kvc... [-o DIR/]\n"
           "Restore a kvcore container. '-' reads the container from standard input / writes to standard output.\n"
           "  .npy: [2, NL, T, NH, HS] when the container records the head split, else [2, NL, T, C];\n"
           "  .safetensors: \"kv\" [2, NL, T, C] with metadata kvcore.num_heads / kvcore.head_size;\n"
           "  MLA containers: [NL, T, HS].\n"
           "  -o, --output OUT  the output ('-': standard output), or a directory (an existing one, or a name\n"
           "                    ending in '/') where each IN.kvc becomes DIR/IN.npy (or .safetensors); without\n"
           "                    -o, each IN.kvc (or IN.kvcs) becomes IN.npy beside it and standard input goes to\n"
           "                    standard output; a batch skips an input whose output exists, does the rest and\n"
           "                    exits 1\n"
           "  -c, --stdout      write to standard output (as -o -)\n"
           "  --progress, --no-progress  a live line on stderr (file, MiB done / total, %%, rate, time left):\n"
           "                    by default only when stderr is a terminal\n"
           "  -f, --force       replace an existing output (never the input)\n"
           "  --format F        npy or safetensors (default: from the output's name; else safetensors with\n"
           "                    --split, npy otherwise)\n"
           "  --split           safetensors only: \"k\" and \"v\" tensors [NL, T, NH, HS]\n"
           "  --json            one JSON object on stdout (shape, sizes, seconds) instead of the summary\n");
}

static int format_of_name(const char *path, cli_format_t *f)
{
    const size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".npy")) *f = CLI_FMT_NPY;
    else if (n > 12 && !strcmp(path + n - 12, ".safetensors")) *f = CLI_FMT_SAFETENSORS;
    else return 0;
    return 1;
}

/* The decoded tensors, written as a file or to standard output; prints the error, returns 0/1. */
static int write_tensors(const char *out, cli_format_t fmt, const kvc_named_tensor_t *nt, size_t n,
                         const kvc_metadata_entry_t *meta, size_t nmeta, size_t *written)
{
    kvc_status_t st;
    if (strcmp(out, "-")) {
        st = fmt == CLI_FMT_NPY ? kvc_npy_write(out, nt[0].tensor) : kvc_safetensors_write(out, nt, n, meta, nmeta);
        struct stat sb;
        *written = st == KVC_OK && stat(out, &sb) == 0 ? (size_t)sb.st_size : 0;
        return st == KVC_OK ? 0 : cli_fail("decode", st);
    }
    /* Standard output: the file image in memory first (its size from the first call). */
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += nt[i].tensor->nbytes;
    len += 1 << 16; /* headers: the .npy header is < 4 KiB, ours in safetensors < 1 KiB */
    uint8_t *buf = malloc(len);
    if (!buf) {
        fprintf(stderr, "kvcore decode: no memory for %zu bytes of output\n", len);
        return CLI_EXIT_ERROR;
    }
    st = fmt == CLI_FMT_NPY ? kvc_npy_write_mem(nt[0].tensor, buf, len, &len)
                            : kvc_safetensors_write_mem(nt, n, meta, nmeta, buf, len, &len);
    *written = len;
    int rc = st == KVC_OK ? cli_write_stdout("decode", buf, len) : cli_fail("decode", st);
    free(buf);
    return rc;
}

/* ---- streams: a file of several containers (kvcore encode --chunk-tokens) */

typedef struct {
    cli_stream_src_t *src;
    kvc_npy_writer_t *w;
    size_t T, es;
    cli_progress_t prog;
    int quiet;
    const char *why; /* a failure the library did not describe */
} stream_dec_t;

static int stream_corrupt(const char *in_path, const char *why)
{
    fprintf(stderr, "kvcore decode: %s: %s: %s\n", kvc_status_string(KVC_ERR_CORRUPT), in_path, why);
    return CLI_EXIT_ERROR;
}

static kvc_status_t src_read(void *user, void *buf, size_t len, size_t *got)
{
    cli_stream_src_t *s = ((stream_dec_t *)user)->src;
    if (s->fd < 0) {
        *got = (size_t)(len < s->size - s->pos ? len : s->size - s->pos);
        memcpy(buf, s->data + s->pos, *got);
        s->pos += *got;
        return KVC_OK;
    }
    for (;;) {
        ssize_t g = read(s->fd, buf, len);
        if (g < 0 && errno == EINTR) continue;
        if (g < 0) {
            fprintf(stderr, "kvcore decode: cannot read the input: %s\n", strerror(errno));
            return KVC_ERR_IO;
        }
        *got = (size_t)g;
        return KVC_OK;
    }
}

static kvc_status_t chunk_to_npy(void *user, size_t t0, const void *chunk, const kvc_codec_info_t *info)
{
    stream_dec_t *d = user;
    const size_t n = info->num_tokens, row = info->num_heads * info->head_size * d->es;
    if (t0 + n > d->T) { /* not the containers the first walk saw */
        d->why = "more tokens than its headers said";
        return KVC_ERR_CORRUPT;
    }
    const size_t L = info->planes * info->num_layers;
    for (size_t l = 0; l < L; l++) {
        kvc_status_t st = kvc_npy_writer_pwrite(d->w, (l * d->T + t0) * row, (const uint8_t *)chunk + l * n * row, n * row);
        if (st != KVC_OK) return st;
    }
    if (!d->quiet) cli_progress(&d->prog, t0 + n, d->T);
    return KVC_OK;
}

static int decode_stream_one(kvc_context_t *ctx, const decode_opts_t *o, const char *in_path, cli_stream_src_t *src,
                             const char *out)
{
    if (o->fmt != CLI_FMT_NPY || o->split || !strcmp(out, "-")) {
        fprintf(stderr, "kvcore decode: %s is a stream of containers: it decodes to an .npy file (written in "
                        "place, chunk by chunk), not to safetensors or standard output\n", in_path);
        return CLI_EXIT_ERROR;
    }
    cli_stream_walk_t walk;
    stream_dec_t d = { .src = src, .T = cli_stream_tokens(src, &walk), .quiet = o->c.quiet || o->w.as_json };
    if (!d.T && walk.stop < src->size) return cli_stream_stopped("decode", in_path, &walk, src->size);
    /* The first container gives the array's kind; the decoder checks that every chunk matches it. */
    uint8_t h[KVC_CONTAINER_HEADER_BYTES];
    kvc_container_info_t ci;
    kvc_codec_info_t info;
    uint8_t *first = NULL;
    const uint64_t c0 = cli_src_pread(src, h, sizeof(h), 0) && kvc_container_probe(h, sizeof(h), &ci) == KVC_OK ? ci.container_bytes : 0;
    kvc_status_t st = KVC_ERR_CORRUPT;
    if (d.T && c0 && c0 <= SIZE_MAX && (first = malloc((size_t)c0)) &&
        cli_src_pread(src, first, (size_t)c0, 0) && (st = kvc_codec_inspect(first, (size_t)c0, &info)) != KVC_OK) {
        free(first);
        return cli_fail("decode", st);
    }
    free(first);
    if (st != KVC_OK) return stream_corrupt(in_path, "its containers' sizes do not add up to the file (truncated or damaged)");
    d.es = kvc_dtype_size(info.dtype);
    cli_progress_begin(&d.prog, in_path, d.T * info.planes * info.num_layers * info.num_heads * info.head_size * d.es);
    kvc_tensor_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.dtype = info.dtype;
    if (info.layout == KVC_CODEC_MLA) {
        desc.ndim = 3;
        desc.shape[0] = info.num_layers, desc.shape[1] = d.T, desc.shape[2] = info.head_size;
    } else if (info.heads_known) {
        desc.ndim = 5;
        desc.shape[0] = 2, desc.shape[1] = info.num_layers, desc.shape[2] = d.T, desc.shape[3] = info.num_heads,
        desc.shape[4] = info.head_size;
    } else {
        desc.ndim = 4;
        desc.shape[0] = 2, desc.shape[1] = info.num_layers, desc.shape[2] = d.T, desc.shape[3] = info.head_size;
    }
    if ((st = kvc_npy_writer_open(out, &desc, &d.w)) != KVC_OK) return cli_fail("decode", st);
    kvc_codec_info_t all;
    const double t0 = cli_now();
    st = kvc_codec_decode_stream(ctx, src_read, &d, chunk_to_npy, &d, &all);
    if (st == KVC_OK && all.num_tokens != d.T) st = KVC_ERR_CORRUPT, d.why = "fewer tokens than its headers said";
    const double dt = cli_now() - t0;
    if (!d.quiet) cli_progress_end();
    kvc_status_t fin = kvc_npy_writer_finish(d.w, st);
    if (d.why) return stream_corrupt(in_path, d.why);
    if (st != KVC_OK) return cli_fail("decode", st);
    if (fin != KVC_OK) return cli_fail("decode", fin);
    if (o->w.as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "input", in_path);
        json_string(&w, "output", out);
        cli_json_chunk_shape(&w, &all);
        json_int(&w, "input_bytes", (long long)all.container_bytes);
        json_int(&w, "output_bytes", (long long)all.original_bytes);
        json_double(&w, "decode_seconds", dt);
        json_double(&w, "gb_per_s", (double)all.original_bytes / dt / 1e9);
        json_end_object(&w);
        json_finish(&w);
    } else if (!o->c.quiet && (o->nfiles == 1 || o->c.verbose)) {
        fprintf(stdout, "%s: %s%zu layers x %zu tokens x %zu channels (%s) from a stream, %s\n", out,
                all.layout == KVC_CODEC_MLA ? "MLA latent cache, " : "", all.num_layers, all.num_tokens,
                all.num_heads * all.head_size, kvc_dtype_name(all.dtype),
                cli_size_line(all.container_bytes, all.original_bytes, all.original_bytes, dt));
    }
    return 0;
}

static int decode_one(kvc_context_t *ctx, const decode_opts_t *o, const char *in_path, const char *out)
{
    cli_format_t fmt = o->fmt;
    if (fmt == CLI_FMT_UNKNOWN && !format_of_name(out, &fmt)) fmt = CLI_FMT_NPY; /* '-' (checked before) */
    struct stat sb;
    /* A regular file is read in place when it is a stream. Anything else is opened once (a FIFO's
     * writer must not be cut off by a second open) and read into memory, where its bytes say
     * whether it is a stream. */
    if (strcmp(in_path, "-") && stat(in_path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        const int fd = open(in_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        uint8_t h[KVC_CONTAINER_HEADER_BYTES];
        if (fd >= 0 && fstat(fd, &sb) == 0 && pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
            cli_kvc_is_stream(h, (size_t)sb.st_size)) {
            cli_stream_src_t src = { .fd = fd, .size = (uint64_t)sb.st_size };
            int rc = decode_stream_one(ctx, o, in_path, &src, out);
            close(fd);
            return rc;
        }
        if (fd >= 0) close(fd);
    }
    cli_input_t in;
    int rc = cli_input_open("decode", in_path, 1, &in);
    if (rc || (rc = cli_input_load("decode", &in)) != 0) {
        cli_input_close(&in);
        return rc;
    }
    if (cli_kvc_is_stream(in.data, in.len)) {
        cli_stream_src_t src = { .fd = -1, .data = in.data, .size = in.len };
        rc = decode_stream_one(ctx, o, in.label, &src, out);
        cli_input_close(&in);
        return rc;
    }
    kvc_codec_info_t info;
    kvc_tensor_t kv = { 0 };
    const double t0 = cli_now();
    kvc_status_t st = kvc_codec_inspect(in.data, in.len, &info);
    if (st == KVC_OK) { /* [2, NL, T, C] or MLA's [NL, T, HS], as kvc_codec_decode_alloc shapes it */
        const size_t shape[4] = { 2, info.num_layers, info.num_tokens, info.num_heads * info.head_size };
        st = info.layout == KVC_CODEC_MLA ? kvc_tensor_alloc(&kv, info.dtype, 3, shape + 1)
                                          : kvc_tensor_alloc(&kv, info.dtype, 4, shape);
    }
    if (st == KVC_OK) {
        /* one live line per window (a batch has its own line, of files) */
        cli_progress_t prog;
        kvc_codec_decode_params_t dp = { 0 };
        if (o->nfiles == 1 && !o->c.quiet && !o->w.as_json) {
            cli_progress_begin(&prog, in.label, info.original_bytes);
            dp = (kvc_codec_decode_params_t){ KVC_CODEC_DECODE_PARAM_PROGRESS, cli_progress, &prog };
        }
        st = kvc_codec_decode_ex(ctx, in.data, in.len, kv.data, kv.nbytes, &dp, NULL);
        if (dp.field_mask) cli_progress_end();
        if (st != KVC_OK) kvc_tensor_free(&kv);
    }
    const double dt = cli_now() - t0;
    if (st != KVC_OK) {
        cli_input_close(&in);
        return cli_fail("decode", st);
    }
    const size_t NL = info.num_layers, T = info.num_tokens, NH = info.num_heads, HS = info.head_size;
    kvc_tensor_t t[2];
    kvc_named_tensor_t nt[2];
    size_t n = 1, nmeta = 0, written = 0;
    char nh[24], hs[24];
    snprintf(nh, sizeof(nh), "%zu", NH);
    snprintf(hs, sizeof(hs), "%zu", HS);
    const kvc_metadata_entry_t meta[2] = { { "kvcore.head_size", hs }, { "kvcore.num_heads", nh } };
    if (o->split && (info.layout == KVC_CODEC_MLA || !info.heads_known)) {
        fprintf(stderr, "kvcore decode: --split needs K and V heads; %s %s\n", in.label,
                info.layout == KVC_CODEC_MLA ? "holds an MLA latent cache (one plane)"
                                             : "does not record the head split (it was encoded from a [2, NL, T, C] "
                                               "file without --heads)");
        rc = CLI_EXIT_ERROR;
        goto done;
    }
    if (info.layout == KVC_CODEC_MLA) {
        const size_t shape[3] = { NL, T, HS };
        st = kvc_tensor_wrap(&t[0], kv.dtype, 3, shape, kv.data);
        nt[0] = (kvc_named_tensor_t){ "latent", &t[0] };
    } else if (o->split) {
        const size_t shape[4] = { NL, T, NH, HS };
        if ((st = kvc_tensor_wrap(&t[0], kv.dtype, 4, shape, kv.data)) == KVC_OK)
            st = kvc_tensor_wrap(&t[1], kv.dtype, 4, shape, (uint8_t *)kv.data + kv.nbytes / 2);
        nt[0] = (kvc_named_tensor_t){ "k", &t[0] };
        nt[1] = (kvc_named_tensor_t){ "v", &t[1] };
        n = 2;
    } else if (fmt == CLI_FMT_NPY && info.heads_known) {
        const size_t shape[5] = { 2, NL, T, NH, HS };
        st = kvc_tensor_wrap(&t[0], kv.dtype, 5, shape, kv.data);
        nt[0] = (kvc_named_tensor_t){ "kv", &t[0] };
    } else {
        const size_t shape[4] = { 2, NL, T, NH * HS };
        st = kvc_tensor_wrap(&t[0], kv.dtype, 4, shape, kv.data);
        nt[0] = (kvc_named_tensor_t){ "kv", &t[0] };
        nmeta = info.heads_known ? 2 : 0;
    }
    if (st != KVC_OK) rc = cli_fail("decode", st);
    else rc = write_tensors(out, fmt, nt, n, meta, nmeta, &written);
    if (rc) goto done;
    if (o->w.as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "input", in_path);
        json_string(&w, "output", out);
        cli_json_chunk_shape(&w, &info);
        json_int(&w, "input_bytes", (long long)in.len);
        json_int(&w, "output_bytes", (long long)kv.nbytes);
        json_int(&w, "file_bytes", (long long)written);
        json_double(&w, "decode_seconds", dt);
        json_double(&w, "gb_per_s", (double)kv.nbytes / dt / 1e9);
        json_end_object(&w);
        json_finish(&w);
    } else if (!o->c.quiet && (o->nfiles == 1 || o->c.verbose)) {
        char heads[64] = "head split unknown";
        if (info.heads_known) snprintf(heads, sizeof(heads), "%zu heads x %zu", NH, HS);
        fprintf(cli_summary_stream(out), "%s: %s%zu layers x %zu tokens x %zu channels (%s, %s), %s\n",
                strcmp(out, "-") ? out : "standard output", info.layout == KVC_CODEC_MLA ? "MLA latent cache, " : "", NL, T,
                NH * HS, heads, kvc_dtype_name(kv.dtype), cli_size_line(in.len, written, kv.nbytes, dt));
    }
done:
    kvc_tensor_free(&kv);
    cli_input_close(&in);
    return rc;
}

int kvc_cmd_decode(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        CLI_OUTPUT_LONG,
        { "format", required_argument, NULL, 'F' },
        { "split", no_argument, NULL, 'P' },
        { NULL, 0, NULL, 0 },
    };
    decode_opts_t o;
    memset(&o, 0, sizeof(o));
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT CLI_OUTPUT_SHORT, longopts, NULL)) != -1) {
        switch (c) {
        case 'P': o.split = 1; break;
        case 'F':
            if (!strcmp(optarg, "npy")) o.fmt = CLI_FMT_NPY;
            else if (!strcmp(optarg, "safetensors")) o.fmt = CLI_FMT_SAFETENSORS;
            else {
                fprintf(stderr, "kvcore decode: --format is npy or safetensors, not '%s'\n", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        default: {
            if (cli_output_option(c, optarg, &o.w)) break;
            int r = cli_common_option("decode", c, argv, &o.c, decode_help);
            if (r >= 0) return r;
        }
        }
    }
    const char *const *in = (const char *const *)argv + optind;
    const int nin = argc - optind;
    if (!nin) {
        fprintf(stderr, "kvcore decode: need IN.kvc (see kvcore decode --help)\n");
        return CLI_EXIT_USAGE;
    }
    if (cli_count_stdin(in, nin) > 1) {
        fprintf(stderr, "kvcore decode: standard input (-) can be given once\n");
        return CLI_EXIT_USAGE;
    }
    /* Derived names (no -o, -o DIR/) take --format, else .safetensors for --split, else .npy. */
    const cli_format_t derived = o.fmt != CLI_FMT_UNKNOWN ? o.fmt : o.split ? CLI_FMT_SAFETENSORS : CLI_FMT_NPY;
    cli_outputs_t op;
    int rc = cli_plan("decode", o.w.out, o.w.to_stdout, in, nin, derived == CLI_FMT_NPY ? ".npy" : ".safetensors", &op);
    if (rc) {
        cli_plan_free(&op, nin);
        return rc;
    }
    const char *out = op.out;
    if (!op.many && nin > 1) {
        fprintf(stderr, "kvcore decode: %d inputs need -o DIR/ or no -o (one output file holds one container)\n", nin);
        rc = CLI_EXIT_USAGE;
    }
    cli_format_t named;
    if (!rc && !op.many && strcmp(out, "-")) {
        if (!format_of_name(out, &named)) {
            if (o.fmt == CLI_FMT_UNKNOWN) {
                fprintf(stderr, "kvcore decode: cannot tell the output type from '%s': name it .npy or .safetensors, "
                                "or give --format\n", out);
                rc = CLI_EXIT_USAGE;
            }
        } else if (o.fmt != CLI_FMT_UNKNOWN && o.fmt != named) {
            fprintf(stderr, "kvcore decode: --format %s contradicts the output name %s\n",
                    o.fmt == CLI_FMT_NPY ? "npy" : "safetensors", out);
            rc = CLI_EXIT_USAGE;
        } else o.fmt = named;
    }
    if (o.fmt == CLI_FMT_UNKNOWN) o.fmt = derived;
    if (!rc && o.split && o.fmt != CLI_FMT_SAFETENSORS) {
        fprintf(stderr, "kvcore decode: --split writes \"k\" and \"v\" into one .safetensors file; an .npy holds one array\n");
        rc = CLI_EXIT_USAGE;
    }
    if (!rc && o.w.as_json && (op.many || !strcmp(out, "-"))) {
        fprintf(stderr, "kvcore decode: --json describes one output file: not with %s\n",
                op.many ? "several outputs" : "standard output (it carries the data)");
        rc = CLI_EXIT_USAGE;
    }
    o.nfiles = op.many ? nin : 1;
    if (!rc && !op.many) rc = cli_check_output("decode", out, o.w.force, in, nin);
    kvc_context_t *ctx = rc ? NULL : cli_open_context("decode");
    if (!rc && !ctx) rc = CLI_EXIT_ERROR;
    if (!rc) cli_install_signal_handlers();
    int failed = 0, skipped = 0;
    cli_progress_t batch;
    size_t batch_bytes = 0;
    struct stat sb;
    for (int i = 0; i < nin; i++) batch_bytes += stat(in[i], &sb) == 0 ? (size_t)sb.st_size : 0;
    cli_progress_begin(&batch, "decode", batch_bytes);
    for (int i = 0; !rc && i < o.nfiles; i++) {
        if (o.nfiles > 1 && !o.c.quiet) cli_progress(&batch, (size_t)i, (size_t)o.nfiles);
        /* A batch goes on past an output it may not write: that file is skipped, said so, counted. */
        if (op.many && cli_check_output("decode", op.outs[i], o.w.force, in, nin)) {
            skipped++;
            continue;
        }
        failed += decode_one(ctx, &o, in[i], op.many ? op.outs[i] : out) != 0;
    }
    if (!rc && o.nfiles > 1) {
        if (!o.c.quiet) cli_progress(&batch, (size_t)o.nfiles, (size_t)o.nfiles);
        cli_progress_end();
        if (!o.c.quiet)
            printf("%s: %d files decoded, %d failed%s\n", op.label, o.nfiles - failed - skipped, failed, cli_skipped_text(skipped));
    }
    if (!rc && (failed || skipped)) rc = CLI_EXIT_ERROR;
    cli_plan_free(&op, nin);
    kvc_context_destroy(ctx);
    return rc;
}
