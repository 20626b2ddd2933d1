/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore encode: CacheGen-compress KV caches stored as .npy / .safetensors into a container, a
 * stream of them (--chunk-tokens), or one container per input of a batch. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvcore.h>

#include "cli.h"
#include "codec_common.h"
#include "files.h"
#include "json.h"
#include "util.h"

static size_t positive(const char *cmd, const char *opt, const char *v, int *bad)
{
    size_t n = 0;
    if (!cli_parse_size(cmd, opt, v, &n)) *bad = 1;
    return n;
}

/* ---- encode's quality options (--level, --bins-k, --bins-v, --key-scaling, --bits, --coder) -----
 * Parsed after the main options; applied once the file's layer count is known. */
typedef struct {
    int level;                  /* -1: none */
    const char *bins[2];        /* K, V: "N" or a per-layer list "N,N,..." */
    int key_scaling;            /* -1: default */
    double bits;                /* 0: none; else the rate target in bits per element */
    int coder;                  /* -1: default (ac); else a kvc_codec_coder_t */
} quality_opts_t;

enum { OPT_LEVEL = 1000, OPT_BINS_K, OPT_BINS_V, OPT_KEY_SCALING, OPT_BITS, OPT_CODER };

/* One quality option from getopt_long: 0 ok, -1 bad value (message printed). */
static int quality_option(int code, const char *v, quality_opts_t *q)
{
    if (code == OPT_LEVEL) {
        char *end;
        const long n = strtol(v, &end, 10);
        if (!*v || *end || n < 0 || n > KVC_CODEC_LEVEL_MAX) {
            fprintf(stderr, "kvcore encode: --level %s: expected 0 .. %d\n", v, KVC_CODEC_LEVEL_MAX);
            return -1;
        }
        q->level = (int)n;
    } else if (code == OPT_BINS_K || code == OPT_BINS_V) {
        /* Each count now, in the flag's terms; how many there are is checked once NL is known. */
        const char *opt = code == OPT_BINS_V ? "--bins-v" : "--bins-k";
        for (const char *s = v;; s++) {
            char *end;
            const unsigned long b = strtoul(s, &end, 10);
            if (end == s || (*end && *end != ',') || *s == '-' || *s == '+') {
                fprintf(stderr, "kvcore encode: %s %s: expected a bin count or comma-separated ones (one per layer)\n", opt, v);
                return -1;
            }
            if (b < 4 || b > 64 || b % 2) {
                fprintf(stderr, "kvcore encode: %s %s: %lu bins: a bin count is even, from 4 to 64\n", opt, v, b);
                return -1;
            }
            if (!*(s = end)) break;
        }
        q->bins[code == OPT_BINS_V] = v;
    } else if (code == OPT_BITS) {
        char *end;
        q->bits = strtod(v, &end);
        if (!*v || *end || !(q->bits > 0 && q->bits <= 64)) {
            fprintf(stderr, "kvcore encode: --bits %s: expected bits per element, a number in (0, 64]\n", v);
            return -1;
        }
    } else if (code == OPT_CODER) {
        if (strcmp(v, "ac") && strcmp(v, "rans")) {
            fprintf(stderr, "kvcore encode: --coder %s: expected ac or rans\n", v);
            return -1;
        }
        q->coder = !strcmp(v, "rans") ? KVC_CODER_RANS : KVC_CODER_AC;
    } else {
        if (strcmp(v, "token") && strcmp(v, "channel")) {
            fprintf(stderr, "kvcore encode: --key-scaling %s: expected token or channel\n", v);
            return -1;
        }
        q->key_scaling = !strcmp(v, "channel");
    }
    return 0;
}

/* "N" (every layer) or NL comma-separated values into bins[0, NL). */
static int parse_bins(const char *opt, const char *v, size_t NL, uint32_t *bins)
{
    size_t n = 0;
    for (const char *s = v; n <= NL;) {
        char *end;
        const unsigned long b = strtoul(s, &end, 10);
        if (end == s || b > 255 || (*end && *end != ',')) break;
        if (n < NL) bins[n] = (uint32_t)b;
        n++;
        if (!*end) {
            if (n == 1) for (size_t l = 1; l < NL; l++) bins[l] = bins[0];
            if (n == 1 || n == NL) return 0;
            break;
        }
        s = end + 1;
    }
    fprintf(stderr, "kvcore encode: %s %s: expected one bin count or %zu comma-separated ones (one per layer)\n", opt, v, NL);
    return -1;
}

/* Fills p's bins / key scaling from the options (bins storage: 2 * NL). */
static int quality_apply(const quality_opts_t *q, kvc_codec_params_t *p, uint32_t *bins)
{
    const size_t NL = p->num_layers;
    if (q->bits > 0 && (q->level >= 0 || q->bins[0] || q->bins[1] || q->key_scaling == 1)) {
        fprintf(stderr, "kvcore encode: --bits chooses the bins itself: not with --level, --bins-k, --bins-v or "
                        "--key-scaling channel\n");
        return CLI_EXIT_USAGE;
    }
    if (q->bits > 0) {
        p->field_mask |= KVC_CODEC_PARAM_BITS;
        p->bits = q->bits;
    }
    if (q->level >= 0 && kvc_codec_level_params(q->level, p, bins) != KVC_OK) return cli_fail("encode", KVC_ERR_INVALID_ARG);
    if ((q->bins[0] || q->bins[1]) && q->level < 0) {
        kvc_cg_default_bins(NL, bins);
        p->bins = bins;
        p->field_mask |= KVC_CODEC_PARAM_BINS;
    }
    for (int pl = 0; pl < 2; pl++)
        if (q->bins[pl] && parse_bins(pl ? "--bins-v" : "--bins-k", q->bins[pl], NL, bins + pl * NL)) return 2;
    if (q->key_scaling >= 0) {
        p->key_scaling = q->key_scaling ? KVC_CODEC_SCALE_CHANNEL : KVC_CODEC_SCALE_TOKEN;
        p->field_mask |= KVC_CODEC_PARAM_KEY_SCALING;
    }
    if (q->coder >= 0) {
        p->coder = (kvc_codec_coder_t)q->coder;
        p->field_mask |= KVC_CODEC_PARAM_CODER;
    }
    return 0;
}

/* A container LMCache cannot read still is a valid .kvc: say so on stderr, with the reason. */
static void warn_if_lmcache_unreadable(const char *out, const uint8_t *buf, size_t len)
{
    kvc_lmcache_chunk_t o;
    void *storage = NULL;
    if (kvc_codec_export_lmcache(buf, len, &o, &storage) == KVC_ERR_UNSUPPORTED)
        fprintf(stderr, "kvcore encode: warning: %s is not readable by LMCache (%s)\n", out, kvc_last_error());
    kvc_codec_free(storage);
}

typedef struct {
    cli_common_t c;
    cli_output_opts_t w; /* -o, -c, -f, --json, --progress */
    int nfiles, file_index;
    kvc_kvcache_io_params_t io;
    kvc_codec_params_t p;
    quality_opts_t q;
    cli_progress_t prog;
    size_t in_bytes, out_bytes;
    double seconds;
    size_t chunk_tokens; /* 0: one container */
} encode_opts_t;

static void encode_help(void)
{
    printf("usage: kvcore encode [OPTIONS] KV_FILE [-o OUT.kvc | -c]\n"
           "       kvcore encode [OPTIONS] K_FILE V_FILE -o OUT.kvc\n"
           "       kvcore encode [OPTIONS] KV_FILE... [-o DIR/]\n"
           "CacheGen-compress a KV cache into a kvcore container.\n"
           "  KV_FILE: .npy or .safetensors (the type is read from the file's first bytes) holding\n"
           "           [2, NL, T, NH*HS] or [2, NL, T, NH, HS] (or \"k\"/\"v\" tensors [NL, T, NH, HS]);\n"
           "  K_FILE V_FILE: two files of [NL, T, NH, HS]. f16, bf16 or f32. '-' reads standard input.\n"
           "  -o, --output OUT  the container ('-': standard output), or a directory (an existing one, or a\n"
           "                    name ending in '/') where each input KV_FILE becomes DIR/NAME.kvc; without -o,\n"
           "                    each KV_FILE becomes NAME.kvc beside it (NAME.kvcs with --chunk-tokens) and\n"
           "                    standard input goes to standard output; a batch skips an input whose output\n"
           "                    exists, does the rest and exits 1\n"
           "  -c, --stdout      write to standard output (as -o -)\n"
           "  --progress, --no-progress  a live line on stderr (file, MiB done / total, %%, rate, time left):\n"
           "                    by default only when stderr is a terminal\n"
           "  -f, --force       replace an existing output (never one of the inputs)\n"
           "  --heads N, --head-size N  the head split of a [2, NL, T, C] input (recorded in the container;\n"
           "                    without them the container says the split is unknown)\n"
           "  --window T        tokens per coded window (default 256, as LMCache)\n"
           "  --json            one JSON object on stdout (shape, sizes, ratio, seconds) instead of the summary\n"
           "  --chunk-tokens N  write a stream (.kvcs): one container per N tokens, read from the .npy by token\n"
           "                    ranges, so memory holds a few chunks (up to 4 coded at once, one per thread)\n"
           "                    whatever the file's size (docs/FORMAT.md)\n"
           "Quality (docs/CACHEGEN.md):\n"
           "  --level N         a named profile, 0-%d, relative to LMCache's default for the layer count (0 = that\n"
           "                    default; higher = smaller; LMCache reads the others only with its config set to\n"
           "                    their bins: kvcore inspect --lmcache-config)\n"
           "  --bins-k B|B,B,.. --bins-v B|B,B,..  quantisation bins for keys / values: one even count in\n"
           "                    [4, 64] for every layer, or one per layer (override the level's)\n"
           "  --key-scaling token|channel  channel: per-channel key scales (format 1.1, not LMCache-readable)\n"
           "  --coder ac|rans   the entropy coder: ac (default) is LMCache's arithmetic coder; rans is kvcore's\n"
           "                    interleaved rANS (format 1.4: same symbols, faster; LMCache cannot read it)\n"
           "  --bits B          size target in bits per element (whole container): bins chosen per layer for K and V\n"
           "                    to minimise the quantisation error within it (kvcore inspect --lmcache-config shows them)\n"
           "A container LMCache cannot read is written with a warning (not for --coder rans, which says so).\n",
           KVC_CODEC_LEVEL_MAX);
}

/* A cache with no layers, tokens or channels: nothing to encode (the container needs all three). */
static int empty_cache(const char *in, size_t layers, size_t tokens, size_t channels)
{
    fprintf(stderr, "kvcore encode: %s holds %zu layers x %zu tokens x %zu channels: nothing to encode (a container "
                    "holds at least one of each)\n", strcmp(in, "-") ? in : "standard input", layers, tokens, channels);
    return CLI_EXIT_ERROR;
}

/* --chunk-tokens: an .npy [2, NL, T, D] or [2, NL, T, NH, HS] read by token ranges (NL*2 strided
 * pieces per chunk) and written as a stream of containers; memory holds the chunks in flight
 * (kvc_codec_encode_stream). */
typedef struct {
    int fd;
    size_t data_offset, L, T, row; /* row: bytes per token of one (plane, layer) */
} npy_ranges_t;

static kvc_status_t npy_range_read(void *user, size_t t0, size_t n, void *dst)
{
    const npy_ranges_t *r = user;
    for (size_t l = 0; l < r->L; l++) {
        uint8_t *d = (uint8_t *)dst + l * n * r->row;
        size_t left = n * r->row, off = r->data_offset + (l * r->T + t0) * r->row;
        while (left) {
            ssize_t g = pread(r->fd, d, left, (off_t)off);
            if (g < 0 && errno == EINTR) continue;
            if (g <= 0) {
                fprintf(stderr, "kvcore encode: cannot read the input: %s\n", g < 0 ? strerror(errno) : "it shrank");
                return KVC_ERR_IO;
            }
            d += g;
            off += (size_t)g;
            left -= (size_t)g;
        }
    }
    return KVC_OK;
}

typedef struct {
    cli_out_t out;
    size_t bytes;
} stream_out_t;

static kvc_status_t stream_write(void *user, const void *buf, size_t len)
{
    stream_out_t *s = user;
    s->bytes += len;
    return cli_out_write(&s->out, buf, len) ? KVC_ERR_IO : KVC_OK;
}

static int encode_stream_one(kvc_context_t *ctx, encode_opts_t *o, const char *in, const char *out)
{
    kvc_tensor_t h;
    npy_ranges_t r = { .fd = -1 };
    cli_input_t src;
    int rc = cli_input_open("encode", in, 0, &src);
    const cli_format_t fmt = src.fmt;
    cli_input_close(&src);
    if (rc) return rc;
    if (fmt != CLI_FMT_NPY) {
        fprintf(stderr, "kvcore encode: --chunk-tokens reads an .npy file by token ranges; %s is %s: encode it without "
                        "--chunk-tokens, or decode it to .npy first\n", in, cli_format_name(fmt));
        return CLI_EXIT_USAGE;
    }
    kvc_status_t st = kvc_npy_read_header(in, &h, &r.data_offset);
    if (st != KVC_OK) return cli_fail("encode", st);
    if (h.ndim < 4 || h.ndim > 5 || h.shape[0] != 2) {
        fprintf(stderr, "kvcore encode: --chunk-tokens takes an .npy of [2, NL, T, D] or [2, NL, T, NH, HS]\n");
        return CLI_EXIT_ERROR;
    }
    if (!h.shape[1] || !h.shape[2] || !h.shape[3] || (h.ndim == 5 && !h.shape[4]))
        return empty_cache(in, h.shape[1], h.shape[2], h.ndim == 5 ? h.shape[3] * h.shape[4] : h.shape[3]);
    kvc_codec_params_t p = o->p;
    p.dtype = h.dtype;
    p.layout = KVC_CODEC_KV_2LTD;
    p.num_layers = h.shape[1];
    p.num_tokens = h.shape[2];
    const size_t D = h.ndim == 5 ? h.shape[3] * h.shape[4] : h.shape[3];
    size_t nh = h.ndim == 5 ? h.shape[3] : 0;
    if (!nh && (o->io.field_mask & KVC_KVCACHE_PARAM_NUM_HEADS)) nh = o->io.num_heads;
    if (!nh && (o->io.field_mask & KVC_KVCACHE_PARAM_HEAD_SIZE) && o->io.head_size) nh = D / o->io.head_size;
    if (nh && (D % nh || ((o->io.field_mask & KVC_KVCACHE_PARAM_HEAD_SIZE) && o->io.head_size * nh != D) ||
               ((o->io.field_mask & KVC_KVCACHE_PARAM_NUM_HEADS) && o->io.num_heads != nh))) {
        fprintf(stderr, "kvcore encode: --heads / --head-size do not fit the %zu channels\n", D);
        return CLI_EXIT_ERROR;
    }
    if (nh) {
        p.num_heads = nh;
        p.head_size = D / nh;
    } else {
        p.num_heads = 1;
        p.head_size = D;
        p.field_mask |= KVC_CODEC_PARAM_HEADS_UNKNOWN;
    }
    r.L = 2 * p.num_layers;
    r.T = p.num_tokens;
    r.row = D * kvc_dtype_size(h.dtype);
    uint32_t *qbins = malloc(2 * p.num_layers * sizeof(uint32_t));
    if (!qbins) return cli_fail("encode", KVC_ERR_NO_MEMORY);
    rc = quality_apply(&o->q, &p, qbins);
    if (rc) {
        free(qbins);
        return rc;
    }
    if ((r.fd = open(in, O_RDONLY | O_CLOEXEC)) < 0) {
        fprintf(stderr, "kvcore encode: cannot open %s: %s\n", in, strerror(errno));
        free(qbins);
        return CLI_EXIT_ERROR;
    }
    if (!o->c.quiet && !o->w.as_json) {
        p.field_mask |= KVC_CODEC_PARAM_PROGRESS;
        p.progress = cli_progress;
        cli_progress_begin(&o->prog, in, h.nbytes);
        p.progress_user = &o->prog;
    }
    stream_out_t so = { .bytes = 0 };
    rc = cli_out_open("encode", out, &so.out);
    const double t0 = cli_now();
    if (!rc) {
        st = kvc_codec_encode_stream(ctx, &p, o->chunk_tokens, npy_range_read, &r, stream_write, &so);
        if (st != KVC_OK && st != KVC_ERR_IO) cli_fail("encode", st);
        rc = cli_out_finish(&so.out, st != KVC_OK);
    }
    const double dt = cli_now() - t0;
    cli_progress_end();
    close(r.fd);
    free(qbins);
    if (rc) return rc;
    const size_t chunks = (p.num_tokens + o->chunk_tokens - 1) / o->chunk_tokens;
    if (o->w.as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "output", out);
        json_string(&w, "dtype", kvc_dtype_name(h.dtype));
        json_int(&w, "layers", (long long)p.num_layers);
        json_int(&w, "tokens", (long long)p.num_tokens);
        json_int(&w, "channels", (long long)D);
        json_int(&w, "chunk_tokens", (long long)o->chunk_tokens);
        json_int(&w, "chunks", (long long)chunks);
        json_int(&w, "input_bytes", (long long)h.nbytes);
        json_int(&w, "output_bytes", (long long)so.bytes);
        json_double(&w, "ratio", (double)h.nbytes / (double)so.bytes);
        json_double(&w, "seconds", dt);
        json_double(&w, "gb_per_s", (double)h.nbytes / dt / 1e9);
        json_end_object(&w);
        json_finish(&w);
    } else if (!o->c.quiet) {
        fprintf(cli_summary_stream(out), "%s: %zu layers x %zu tokens x %zu channels (%s) in %zu chunks of %zu tokens, %s\n",
                strcmp(out, "-") ? out : "standard output", p.num_layers, p.num_tokens, D, kvc_dtype_name(h.dtype), chunks,
                o->chunk_tokens, cli_size_line(h.nbytes, so.bytes, h.nbytes, dt));
    }
    return 0;
}

static int encode_one(kvc_context_t *ctx, encode_opts_t *o, const char *const *in, int nin, const char *out)
{
    cli_input_t src[2];
    int rc = 0;
    for (int i = 0; i < nin; i++)
        if ((rc = cli_input_open("encode", in[i], 0, &src[i])) != 0) {
            if (i) cli_input_close(&src[0]);
            return rc;
        }
    kvc_kvcache_io_params_t io = o->io;
    io.field_mask |= KVC_KVCACHE_PARAM_FORMAT;
    io.format = src[0].fmt == CLI_FMT_NPY ? KVC_FILE_NPY : KVC_FILE_SAFETENSORS;
    kvc_tensor_t kv;
    kvc_kvcache_dims_t dims;
    kvc_status_t st;
    if (nin == 2) {
        io.field_mask &= ~(uint64_t)KVC_KVCACHE_PARAM_FORMAT; /* K and V may be of different types */
        st = kvc_kvcache_load_pair(in[0], in[1], &io, &kv, &dims);
    } else if (src[0].stream) st = kvc_kvcache_load_mem(src[0].data, src[0].len, &io, &kv, &dims);
    else st = kvc_kvcache_load(in[0], &io, &kv, &dims);
    for (int i = 0; i < nin; i++) cli_input_close(&src[i]);
    if (st != KVC_OK) return cli_fail("encode", st);
    if (!dims.num_layers || !dims.num_tokens || !dims.hidden) {
        rc = empty_cache(in[0], dims.num_layers, dims.num_tokens, dims.hidden);
        kvc_tensor_free(&kv);
        return rc;
    }
    kvc_codec_params_t p = o->p;
    p.dtype = kv.dtype;
    p.layout = KVC_CODEC_KV_2LTD;
    p.num_layers = dims.num_layers;
    p.num_tokens = dims.num_tokens;
    if (dims.num_heads) {
        p.num_heads = dims.num_heads;
        p.head_size = dims.head_size;
    } else { /* the channels are exact without the split: the codec only needs C */
        p.num_heads = 1;
        p.head_size = dims.hidden;
        p.field_mask |= KVC_CODEC_PARAM_HEADS_UNKNOWN;
    }
    uint32_t *qbins = malloc(2 * p.num_layers * sizeof(uint32_t));
    if (!qbins) {
        kvc_tensor_free(&kv);
        return cli_fail("encode", KVC_ERR_NO_MEMORY);
    }
    if ((rc = quality_apply(&o->q, &p, qbins)) != 0) {
        free(qbins);
        kvc_tensor_free(&kv);
        return rc;
    }
    if (!o->c.quiet && !o->w.as_json) {
        p.field_mask |= KVC_CODEC_PARAM_PROGRESS;
        p.progress = cli_progress;
        char name[64];
        if (o->nfiles > 1) snprintf(name, sizeof(name), "%.30s (%d/%d)", in[0], o->file_index + 1, o->nfiles);
        else snprintf(name, sizeof(name), "%s", strcmp(in[0], "-") ? in[0] : "standard input");
        cli_progress_begin(&o->prog, name, kv.nbytes);
        p.progress_user = &o->prog;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    const double t0 = cli_now();
    st = kvc_codec_encode(ctx, &p, kv.data, &buf, &len);
    const double dt = cli_now() - t0;
    if (o->nfiles == 1) cli_progress_end();
    free(qbins);
    if (st == KVC_OK && o->q.coder != KVC_CODER_RANS) warn_if_lmcache_unreadable(out, buf, len);
    if (st != KVC_OK) rc = cli_fail("encode", st);
    else if ((rc = cli_write_file("encode", out, buf, len)) == 0) {
        o->in_bytes += kv.nbytes;
        o->out_bytes += len;
        o->seconds += dt;
        if (o->w.as_json) {
            json_writer_t w;
            json_init(&w, stdout, 1);
            json_begin_object(&w, NULL);
            json_string(&w, "output", out);
            json_string(&w, "dtype", kvc_dtype_name(kv.dtype));
            json_int(&w, "layers", (long long)p.num_layers);
            json_int(&w, "tokens", (long long)p.num_tokens);
            json_int(&w, "channels", (long long)(p.num_heads * p.head_size));
            if (dims.num_heads) {
                json_int(&w, "heads", (long long)p.num_heads);
                json_int(&w, "head_size", (long long)p.head_size);
            }
            json_int(&w, "input_bytes", (long long)kv.nbytes);
            json_int(&w, "output_bytes", (long long)len);
            json_double(&w, "ratio", (double)kv.nbytes / (double)len);
            json_double(&w, "seconds", dt);
            json_double(&w, "gb_per_s", (double)kv.nbytes / dt / 1e9);
            json_end_object(&w);
            json_finish(&w);
        } else if (!o->c.quiet && (o->nfiles == 1 || o->c.verbose)) {
            char heads[64] = "head split unknown";
            if (dims.num_heads) snprintf(heads, sizeof(heads), "%zu heads x %zu", p.num_heads, p.head_size);
            if (o->nfiles > 1) cli_progress_end();
            fprintf(cli_summary_stream(out), "%s: %zu layers x %zu tokens x %zu channels (%s, %s), %s\n",
                    strcmp(out, "-") ? out : "standard output", p.num_layers, p.num_tokens, p.num_heads * p.head_size, heads,
                    kvc_dtype_name(kv.dtype), cli_size_line(kv.nbytes, len, kv.nbytes, dt));
        }
    }
    kvc_codec_free(buf);
    kvc_tensor_free(&kv);
    return rc;
}

int kvc_cmd_encode(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        CLI_OUTPUT_LONG,
        { "heads", required_argument, NULL, 'H' },
        { "head-size", required_argument, NULL, 'S' },
        { "window", required_argument, NULL, 'W' },
        { "level", required_argument, NULL, OPT_LEVEL },
        { "bins-k", required_argument, NULL, OPT_BINS_K },
        { "bins-v", required_argument, NULL, OPT_BINS_V },
        { "key-scaling", required_argument, NULL, OPT_KEY_SCALING },
        { "bits", required_argument, NULL, OPT_BITS },
        { "coder", required_argument, NULL, OPT_CODER },
        { "chunk-tokens", required_argument, NULL, 'C' },
        { NULL, 0, NULL, 0 },
    };
    encode_opts_t o;
    memset(&o, 0, sizeof(o));
    o.q.level = o.q.key_scaling = o.q.coder = -1;
    int c, bad = 0;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT CLI_OUTPUT_SHORT, longopts, NULL)) != -1) {
        switch (c) {
        case OPT_LEVEL:
        case OPT_BINS_K:
        case OPT_BINS_V:
        case OPT_KEY_SCALING:
        case OPT_BITS:
        case OPT_CODER: bad = quality_option(c, optarg, &o.q) != 0; break;
        case 'H':
            o.io.num_heads = positive("encode", "--heads", optarg, &bad);
            o.io.field_mask |= KVC_KVCACHE_PARAM_NUM_HEADS;
            break;
        case 'S':
            o.io.head_size = positive("encode", "--head-size", optarg, &bad);
            o.io.field_mask |= KVC_KVCACHE_PARAM_HEAD_SIZE;
            break;
        case 'C': o.chunk_tokens = positive("encode", "--chunk-tokens", optarg, &bad); break;
        case 'W': {
            size_t w = positive("encode", "--window", optarg, &bad);
            if (!bad && w > UINT32_MAX) {
                fprintf(stderr, "kvcore encode: --window %s is too large\n", optarg);
                bad = 1;
            }
            o.p.window_tokens = (uint32_t)w;
            o.p.field_mask |= KVC_CODEC_PARAM_WINDOW;
            break;
        }
        default: {
            if (cli_output_option(c, optarg, &o.w)) break;
            int r = cli_common_option("encode", c, argv, &o.c, encode_help);
            if (r >= 0) return r;
        }
        }
        if (bad) return CLI_EXIT_USAGE;
    }
    const char *const *in = (const char *const *)argv + optind;
    const int nin = argc - optind;
    if (!nin) {
        fprintf(stderr, "kvcore encode: need an input file (see kvcore encode --help)\n");
        return CLI_EXIT_USAGE;
    }
    if (cli_count_stdin(in, nin) > 1) {
        fprintf(stderr, "kvcore encode: standard input (-) can be given once\n");
        return CLI_EXIT_USAGE;
    }
    /* Two inputs with one output file are a K/V pair; without -o every input is its own cache. */
    cli_outputs_t op;
    int rc = cli_plan("encode", o.w.out, o.w.to_stdout, in, nin, o.chunk_tokens ? ".kvcs" : ".kvc", &op);
    if (rc) {
        cli_plan_free(&op, nin);
        return rc;
    }
    const char *out = op.out;
    if (!op.many && nin > 2) {
        fprintf(stderr, "kvcore encode: %d inputs: one output file takes a KV file or a K and a V file; for several, "
                        "give -o DIR/ or no -o (each beside its input)\n", nin);
        rc = CLI_EXIT_USAGE;
    } else if (!op.many && nin == 2 && cli_count_stdin(in, nin)) {
        fprintf(stderr, "kvcore encode: standard input can hold a KV file, not one of a K/V pair\n");
        rc = CLI_EXIT_USAGE;
    } else if (o.w.as_json && (op.many || !strcmp(out, "-"))) {
        fprintf(stderr, "kvcore encode: --json describes one output file: not with %s\n",
                op.many ? "several outputs" : "standard output (it carries the container)");
        rc = CLI_EXIT_USAGE;
    } else if (o.chunk_tokens && (op.many || nin != 1 || !strcmp(in[0], "-"))) {
        fprintf(stderr, "kvcore encode: --chunk-tokens reads one .npy file by token ranges: not standard input, a K/V "
                        "pair or several files\n");
        rc = CLI_EXIT_USAGE;
    }
    o.nfiles = op.many ? nin : 1;
    if (!rc && !op.many) rc = cli_check_output("encode", out, o.w.force, in, nin);
    kvc_context_t *ctx = rc ? NULL : cli_open_context("encode");
    if (!rc && !ctx) rc = CLI_EXIT_ERROR;
    if (!rc) cli_install_signal_handlers();
    int failed = 0, skipped = 0, last = 0;
    for (int i = 0; !rc && i < o.nfiles; i++) {
        o.file_index = i;
        /* A batch goes on past an output it may not write: that file is skipped, said so, counted. */
        if (op.many && cli_check_output("encode", op.outs[i], o.w.force, in, nin)) {
            skipped++;
            continue;
        }
        last = o.chunk_tokens ? encode_stream_one(ctx, &o, in[0], out)
               : op.many      ? encode_one(ctx, &o, in + i, 1, op.outs[i])
                              : encode_one(ctx, &o, in, nin, out);
        failed += last != 0;
    }
    if (!rc && op.many) {
        cli_progress_end();
        if (!o.c.quiet)
            printf("%s: %d files encoded, %d failed%s%s%s\n", op.label, o.nfiles - failed - skipped, failed,
                   cli_skipped_text(skipped), o.out_bytes ? ", " : "", o.out_bytes ? cli_size_line(o.in_bytes, o.out_bytes, o.in_bytes, o.seconds) : "");
    }
    /* Two inputs without -o are two caches; when neither is one, they may well be a K/V pair. */
    if (!rc && op.many && nin == 2 && failed == 2 && !o.w.to_stdout)
        fprintf(stderr, "kvcore encode: if %s and %s are a K and a V file, encode them into one container: "
                        "kvcore encode %s %s -o X.kvc\n", in[0], in[1], in[0], in[1]);
    /* One file: its own exit status (a bad --bins-k list is a usage error once NL is known). */
    if (!rc && (failed || skipped)) rc = o.nfiles == 1 ? last : CLI_EXIT_ERROR;
    cli_plan_free(&op, nin);
    kvc_context_destroy(ctx);
    return rc;
}
