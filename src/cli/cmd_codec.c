/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore encode / decode / inspect: CacheGen-compress KV caches stored as .npy / .safetensors. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvcore.h>

#include "chart.h"
#include "cli.h"
#include "files.h"
#include "json.h"
#include "lmcache_config.h"
#include "util.h"

static kvc_context_t *open_context(const char *cmd)
{
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(NULL, &ctx);
    if (st != KVC_OK) {
        cli_fail(cmd, st);
        return NULL;
    }
    return ctx;
}

static const char *layout_name(const kvc_codec_info_t *info) { return info->layout == KVC_CODEC_MLA ? "MLA" : "KV_2LTD"; }

/* The chunk a container holds, as JSON fields (decode and inspect). */
static const char *coder_name(const kvc_codec_info_t *info) { return info->coder == KVC_CODER_RANS ? "rans" : "ac"; }

static void json_chunk_shape(json_writer_t *w, const kvc_codec_info_t *info)
{
    json_string(w, "dtype", kvc_dtype_name(info->dtype));
    json_string(w, "layout", layout_name(info));
    json_int(w, "layers", (long long)info->num_layers);
    json_int(w, "tokens", (long long)info->num_tokens);
    json_int(w, "heads", (long long)info->num_heads);
    json_int(w, "head_size", (long long)info->head_size);
    json_bool(w, "heads_known", info->heads_known);
    json_string(w, "coder", coder_name(info));
}

/* Where the summary goes: standard output, unless the data does. */
static FILE *summary_stream(const char *out) { return strcmp(out, "-") ? stdout : stderr; }

/* "512 MiB => 109 MiB (4.68x) in 19.2 s, 26.7 MiB/s": sizes and the rate (of the uncompressed
 * side, raw) for people; --json keeps the exact numbers. */
static const char *size_line(size_t from, size_t to, size_t raw, double seconds)
{
    static char line[128];
    char a[16], b[16], r[16];
    snprintf(line, sizeof(line), "%s => %s (%.2fx) in %.*f s, %s/s", cli_human((double)from, a), cli_human((double)to, b),
             from > to ? (double)from / (double)to : (double)to / (double)from, seconds < 10 ? 2 : 1, seconds,
             cli_human(seconds > 0 ? (double)raw / seconds : 0, r));
    return line;
}

static int count_stdin(const char *const *in, int n)
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

/* Where the outputs go, as zstd decides it: -o FILE, -o DIR/ (each input becomes DIR/STEM.ext),
 * -c or -o - (standard output), or no -o: standard input to standard output, each named input
 * beside itself (kv.npy -> kv.kvc). */
typedef struct {
    const char *out;  /* the one output (a path or "-"), or NULL when each input has its own */
    const char *dir;  /* -o DIR/ */
    char **outs;      /* [nin]: each input's output when out is NULL */
    int many;         /* outs is used: a batch, where an input whose output cannot be written is skipped */
    const char *label; /* the batch summary's subject */
} outputs_t;

static int plan(const char *cmd, const char *out, int to_stdout, const char *const *in, int nin, const char *ext,
                outputs_t *p)
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

/* ", N skipped" for a batch summary ("" when none). */
static const char *skipped_text(int skipped)
{
    static char t[32];
    if (skipped) snprintf(t, sizeof(t), ", %d skipped", skipped);
    else t[0] = '\0';
    return t;
}

static void plan_free(outputs_t *p, int nin)
{
    for (int i = 0; p->outs && i < nin; i++) free(p->outs[i]);
    free(p->outs);
}

static size_t positive(const char *cmd, const char *opt, const char *v, int *bad)
{
    size_t n = 0;
    if (!cli_parse_size(cmd, opt, v, &n)) *bad = 1;
    return n;
}

/* ------------------------------------------------------------------ encode */

/* ---- encode's quality options (--level, --bins-k, --bins-v, --key-scaling, --bits, --coder) -----
 * Parsed after the main options; applied once the file's layer count is known. */
typedef struct {
    int level;                  /* -1: none */
    const char *bins[2];        /* K, V: "N" or a per-layer list "N,N,..." */
    int key_scaling;            /* -1: default */
    double bits;                /* 0: none; else the rate target in bits per element */
    int coder;                  /* -1: default (ac); else a kvc_codec_coder_t */
} quality_opts_t;

enum { OPT_LEVEL = 1000, OPT_BINS_K, OPT_BINS_V, OPT_KEY_SCALING, OPT_BITS, OPT_LMCACHE_CONFIG, OPT_CODER };
/* --progress / --no-progress (encode and decode). */
enum { OPT_PROGRESS = 1100, OPT_NO_PROGRESS };
/* --chart / --no-chart / --svg FILE (inspect; demo has its own). */
enum { OPT_CHART = 1200, OPT_NO_CHART, OPT_SVG };
#define PROGRESS_LONG { "progress", no_argument, NULL, OPT_PROGRESS }, { "no-progress", no_argument, NULL, OPT_NO_PROGRESS }

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
    int force, as_json, nfiles, file_index;
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
    if (!o->c.quiet && !o->as_json) {
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
    if (o->as_json) {
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
        fprintf(summary_stream(out), "%s: %zu layers x %zu tokens x %zu channels (%s) in %zu chunks of %zu tokens, %s\n",
                strcmp(out, "-") ? out : "standard output", p.num_layers, p.num_tokens, D, kvc_dtype_name(h.dtype), chunks,
                o->chunk_tokens, size_line(h.nbytes, so.bytes, h.nbytes, dt));
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
    if (!o->c.quiet && !o->as_json) {
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
        if (o->as_json) {
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
            fprintf(summary_stream(out), "%s: %zu layers x %zu tokens x %zu channels (%s, %s), %s\n",
                    strcmp(out, "-") ? out : "standard output", p.num_layers, p.num_tokens, p.num_heads * p.head_size, heads,
                    kvc_dtype_name(kv.dtype), size_line(kv.nbytes, len, kv.nbytes, dt));
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
        { "output", required_argument, NULL, 'o' },
        { "stdout", no_argument, NULL, 'c' },
        { "force", no_argument, NULL, 'f' },
        { "heads", required_argument, NULL, 'H' },
        { "head-size", required_argument, NULL, 'S' },
        { "window", required_argument, NULL, 'W' },
        { "json", no_argument, NULL, 'J' },
        { "level", required_argument, NULL, OPT_LEVEL },
        { "bins-k", required_argument, NULL, OPT_BINS_K },
        { "bins-v", required_argument, NULL, OPT_BINS_V },
        { "key-scaling", required_argument, NULL, OPT_KEY_SCALING },
        { "bits", required_argument, NULL, OPT_BITS },
        { "coder", required_argument, NULL, OPT_CODER },
        { "chunk-tokens", required_argument, NULL, 'C' },
        PROGRESS_LONG,
        { NULL, 0, NULL, 0 },
    };
    encode_opts_t o;
    memset(&o, 0, sizeof(o));
    o.q.level = o.q.key_scaling = o.q.coder = -1;
    const char *out = NULL;
    int c, bad = 0, to_stdout = 0;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT "o:fc", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'c': to_stdout = 1; break;
        case OPT_PROGRESS:
        case OPT_NO_PROGRESS: cli_progress_mode(c == OPT_PROGRESS); break;
        case 'f': o.force = 1; break;
        case 'J': o.as_json = 1; break;
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
    if (count_stdin(in, nin) > 1) {
        fprintf(stderr, "kvcore encode: standard input (-) can be given once\n");
        return CLI_EXIT_USAGE;
    }
    /* Two inputs with one output file are a K/V pair; without -o every input is its own cache. */
    outputs_t op;
    int rc = plan("encode", out, to_stdout, in, nin, o.chunk_tokens ? ".kvcs" : ".kvc", &op);
    if (rc) {
        plan_free(&op, nin);
        return rc;
    }
    out = op.out;
    if (!op.many && nin > 2) {
        fprintf(stderr, "kvcore encode: %d inputs: one output file takes a KV file or a K and a V file; for several, "
                        "give -o DIR/ or no -o (each beside its input)\n", nin);
        rc = CLI_EXIT_USAGE;
    } else if (!op.many && nin == 2 && count_stdin(in, nin)) {
        fprintf(stderr, "kvcore encode: standard input can hold a KV file, not one of a K/V pair\n");
        rc = CLI_EXIT_USAGE;
    } else if (o.as_json && (op.many || !strcmp(out, "-"))) {
        fprintf(stderr, "kvcore encode: --json describes one output file: not with %s\n",
                op.many ? "several outputs" : "standard output (it carries the container)");
        rc = CLI_EXIT_USAGE;
    } else if (o.chunk_tokens && (op.many || nin != 1 || !strcmp(in[0], "-"))) {
        fprintf(stderr, "kvcore encode: --chunk-tokens reads one .npy file by token ranges: not standard input, a K/V "
                        "pair or several files\n");
        rc = CLI_EXIT_USAGE;
    }
    o.nfiles = op.many ? nin : 1;
    if (!rc && !op.many) rc = cli_check_output("encode", out, o.force, in, nin);
    kvc_context_t *ctx = rc ? NULL : open_context("encode");
    if (!rc && !ctx) rc = CLI_EXIT_ERROR;
    if (!rc) cli_install_signal_handlers();
    int failed = 0, skipped = 0, last = 0;
    for (int i = 0; !rc && i < o.nfiles; i++) {
        o.file_index = i;
        /* A batch goes on past an output it may not write: that file is skipped, said so, counted. */
        if (op.many && cli_check_output("encode", op.outs[i], o.force, in, nin)) {
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
                   skipped_text(skipped), o.out_bytes ? ", " : "", o.out_bytes ? size_line(o.in_bytes, o.out_bytes, o.in_bytes, o.seconds) : "");
    }
    /* Two inputs without -o are two caches; when neither is one, they may well be a K/V pair. */
    if (!rc && op.many && nin == 2 && failed == 2 && !to_stdout)
        fprintf(stderr, "kvcore encode: if %s and %s are a K and a V file, encode them into one container: "
                        "kvcore encode %s %s -o X.kvc\n", in[0], in[1], in[0], in[1]);
    /* One file: its own exit status (a bad --bins-k list is a usage error once NL is known). */
    if (!rc && (failed || skipped)) rc = o.nfiles == 1 ? last : CLI_EXIT_ERROR;
    plan_free(&op, nin);
    kvc_context_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------ decode */

typedef struct {
    cli_common_t c;
    int force, as_json, split, nfiles;
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

/* Where a stream's bytes are: a regular file (read in place with pread, so memory holds a few
 * chunks whatever its size) or memory (standard input, a pipe, a device: read fully first). */
typedef struct {
    int fd;              /* -1: data */
    const uint8_t *data;
    uint64_t size, pos;  /* pos: the sequential reader's position */
} stream_src_t;

/* n bytes at off, all of them (1) or not (0). */
static int src_pread(const stream_src_t *s, void *buf, size_t n, uint64_t off)
{
    if (off > s->size || n > s->size - off) return 0;
    if (s->fd < 0) {
        memcpy(buf, s->data + off, n);
        return 1;
    }
    return pread(s->fd, buf, n, (off_t)off) == (ssize_t)n;
}

/* Where a walk over a stream's headers stopped: at byte stop, after `chunks` whole containers;
 * st KVC_OK: a cut container or trailing bytes, else the probe's status for a damaged header or
 * META (its message in kvc_last_error) and bytes that container's size when its header says it. */
typedef struct {
    uint64_t stop, bytes;
    size_t chunks;
    kvc_status_t st;
} stream_walk_t;

/* The whole stream's token count, from each container's META (kvc_container_probe), so the .npy
 * header can be written first; 0 when the walk did not reach the end cleanly (*w says where and
 * why). Damage the probe does not see is left to the decoder to report. */
static size_t stream_tokens(const stream_src_t *s, stream_walk_t *w)
{
    uint64_t off = 0, T = 0;
    uint8_t h[KVC_CONTAINER_PROBE_BYTES];
    memset(w, 0, sizeof(*w));
    for (; off < s->size; w->stop = off, w->chunks++) {
        const size_t n = s->size - off < sizeof(h) ? (size_t)(s->size - off) : sizeof(h);
        kvc_container_info_t ci;
        if (!src_pread(s, h, n, off)) return 0;
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

/* A walk that stopped: "corrupt ...: IN: after N bytes of whole containers, M bytes that are not
 * one (...)", or the damaged container's error (inspect: with its chunk and bytes, as its loop
 * over the chunks says it). */
static int stream_stopped(const char *cmd, const char *in_path, const stream_walk_t *w, uint64_t size)
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

/* The size of the container at buf[0, len), one of a stream stream_tokens walked. */
static size_t container_at(const uint8_t *buf, size_t len)
{
    kvc_container_info_t ci;
    return kvc_container_probe(buf, len, &ci) == KVC_OK ? (size_t)ci.container_bytes : len;
}

typedef struct {
    stream_src_t *src;
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
    stream_src_t *s = ((stream_dec_t *)user)->src;
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

static int decode_stream_one(kvc_context_t *ctx, const decode_opts_t *o, const char *in_path, stream_src_t *src,
                             const char *out)
{
    if (o->fmt != CLI_FMT_NPY || o->split || !strcmp(out, "-")) {
        fprintf(stderr, "kvcore decode: %s is a stream of containers: it decodes to an .npy file (written in "
                        "place, chunk by chunk), not to safetensors or standard output\n", in_path);
        return CLI_EXIT_ERROR;
    }
    stream_walk_t walk;
    stream_dec_t d = { .src = src, .T = stream_tokens(src, &walk), .quiet = o->c.quiet || o->as_json };
    if (!d.T && walk.stop < src->size) return stream_stopped("decode", in_path, &walk, src->size);
    /* The first container gives the array's kind; the decoder checks that every chunk matches it. */
    uint8_t h[KVC_CONTAINER_HEADER_BYTES];
    kvc_container_info_t ci;
    kvc_codec_info_t info;
    uint8_t *first = NULL;
    const uint64_t c0 = src_pread(src, h, sizeof(h), 0) && kvc_container_probe(h, sizeof(h), &ci) == KVC_OK ? ci.container_bytes : 0;
    kvc_status_t st = KVC_ERR_CORRUPT;
    if (d.T && c0 && c0 <= SIZE_MAX && (first = malloc((size_t)c0)) &&
        src_pread(src, first, (size_t)c0, 0) && (st = kvc_codec_inspect(first, (size_t)c0, &info)) != KVC_OK) {
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
    if (o->as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "input", in_path);
        json_string(&w, "output", out);
        json_chunk_shape(&w, &all);
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
                size_line(all.container_bytes, all.original_bytes, all.original_bytes, dt));
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
            stream_src_t src = { .fd = fd, .size = (uint64_t)sb.st_size };
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
        stream_src_t src = { .fd = -1, .data = in.data, .size = in.len };
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
        if (o->nfiles == 1 && !o->c.quiet && !o->as_json) {
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
    if (o->as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "input", in_path);
        json_string(&w, "output", out);
        json_chunk_shape(&w, &info);
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
        fprintf(summary_stream(out), "%s: %s%zu layers x %zu tokens x %zu channels (%s, %s), %s\n",
                strcmp(out, "-") ? out : "standard output", info.layout == KVC_CODEC_MLA ? "MLA latent cache, " : "", NL, T,
                NH * HS, heads, kvc_dtype_name(kv.dtype), size_line(in.len, written, kv.nbytes, dt));
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
        { "output", required_argument, NULL, 'o' },
        { "stdout", no_argument, NULL, 'c' },
        { "force", no_argument, NULL, 'f' },
        { "format", required_argument, NULL, 'F' },
        { "split", no_argument, NULL, 'P' },
        { "json", no_argument, NULL, 'J' },
        PROGRESS_LONG,
        { NULL, 0, NULL, 0 },
    };
    decode_opts_t o;
    memset(&o, 0, sizeof(o));
    const char *out = NULL;
    int c, to_stdout = 0;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT "o:fc", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'c': to_stdout = 1; break;
        case OPT_PROGRESS:
        case OPT_NO_PROGRESS: cli_progress_mode(c == OPT_PROGRESS); break;
        case 'f': o.force = 1; break;
        case 'P': o.split = 1; break;
        case 'J': o.as_json = 1; break;
        case 'F':
            if (!strcmp(optarg, "npy")) o.fmt = CLI_FMT_NPY;
            else if (!strcmp(optarg, "safetensors")) o.fmt = CLI_FMT_SAFETENSORS;
            else {
                fprintf(stderr, "kvcore decode: --format is npy or safetensors, not '%s'\n", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        default: {
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
    if (count_stdin(in, nin) > 1) {
        fprintf(stderr, "kvcore decode: standard input (-) can be given once\n");
        return CLI_EXIT_USAGE;
    }
    /* Derived names (no -o, -o DIR/) take --format, else .safetensors for --split, else .npy. */
    const cli_format_t derived = o.fmt != CLI_FMT_UNKNOWN ? o.fmt : o.split ? CLI_FMT_SAFETENSORS : CLI_FMT_NPY;
    outputs_t op;
    int rc = plan("decode", out, to_stdout, in, nin, derived == CLI_FMT_NPY ? ".npy" : ".safetensors", &op);
    if (rc) {
        plan_free(&op, nin);
        return rc;
    }
    out = op.out;
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
    if (!rc && o.as_json && (op.many || !strcmp(out, "-"))) {
        fprintf(stderr, "kvcore decode: --json describes one output file: not with %s\n",
                op.many ? "several outputs" : "standard output (it carries the data)");
        rc = CLI_EXIT_USAGE;
    }
    o.nfiles = op.many ? nin : 1;
    if (!rc && !op.many) rc = cli_check_output("decode", out, o.force, in, nin);
    kvc_context_t *ctx = rc ? NULL : open_context("decode");
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
        if (op.many && cli_check_output("decode", op.outs[i], o.force, in, nin)) {
            skipped++;
            continue;
        }
        failed += decode_one(ctx, &o, in[i], op.many ? op.outs[i] : out) != 0;
    }
    if (!rc && o.nfiles > 1) {
        if (!o.c.quiet) cli_progress(&batch, (size_t)o.nfiles, (size_t)o.nfiles);
        cli_progress_end();
        if (!o.c.quiet)
            printf("%s: %d files decoded, %d failed%s\n", op.label, o.nfiles - failed - skipped, failed, skipped_text(skipped));
    }
    if (!rc && (failed || skipped)) rc = CLI_EXIT_ERROR;
    plan_free(&op, nin);
    kvc_context_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------ inspect */

static void inspect_help(void)
{
    printf("usage: kvcore inspect [OPTIONS] IN.kvc\n"
           "Header, sizes and ratios, coded bits/symbol vs entropy per layer. '-' reads standard input.\n"
           "  --original KV_FILE      also the reconstruction error per layer against the original: the\n"
           "  --original K --original V   inputs encode takes (a KV file, or a K file and a V file)\n"
           "  --json                  one JSON object on stdout\n"
           "  --lmcache-config        the settings LMCache needs to read it (bins per layer for K and V), or why\n"
           "                          it cannot; with --original, also every level's size on the original\n"
           "  --chart, --no-chart     a bar chart of bits/symbol (and error, with --original) per layer after\n"
           "                          the table: by default only when standard output is a terminal\n"
           "  --svg FILE              the same chart as an SVG image ('-': standard output, instead of the report)\n"
           "  -f, --force             replace an existing --svg FILE\n");
}

/* The original as encode would read it, checked against the container. */
static int load_original(const char *const *orig, int norig, const kvc_codec_info_t *info, kvc_tensor_t *kv)
{
    cli_input_t src[2];
    int rc = 0;
    for (int i = 0; i < norig; i++)
        if ((rc = cli_input_open("inspect", orig[i], 0, &src[i])) != 0) {
            if (i) cli_input_close(&src[0]);
            return rc;
        }
    kvc_kvcache_io_params_t io = { 0 };
    if (info->heads_known) {
        io.field_mask = KVC_KVCACHE_PARAM_NUM_HEADS;
        io.num_heads = info->num_heads;
    }
    kvc_status_t st;
    if (norig == 2) st = kvc_kvcache_load_pair(orig[0], orig[1], &io, kv, NULL);
    else if (src[0].stream) st = kvc_kvcache_load_mem(src[0].data, src[0].len, &io, kv, NULL);
    else st = kvc_kvcache_load(orig[0], &io, kv, NULL);
    for (int i = 0; i < norig; i++) cli_input_close(&src[i]);
    if (st != KVC_OK) return cli_fail("inspect", st);
    if (kv->nbytes != info->original_bytes || kv->dtype != info->dtype) {
        fprintf(stderr, "kvcore inspect: the original (%s, %zu bytes) does not match the container (%s, %zu bytes)\n",
                kvc_dtype_name(kv->dtype), kv->nbytes, kvc_dtype_name(info->dtype), info->original_bytes);
        kvc_tensor_free(kv);
        return CLI_EXIT_ERROR;
    }
    return 0;
}

/* A stream (.kvcs): one row per chunk (its tokens, bytes, ratio, bits per symbol) and the totals.
 * Every chunk is validated as a container and must be of the first chunk's kind, as decode
 * requires. */
/* Bits/symbol per (plane, layer) over a stream's n chunks: each chunk's layer stats weighted by its
 * tokens (total bits over total symbols). *rows: planes * layers rows, or the exit status. */
static int stream_layer_rows(const char *label, const uint8_t *buf, const kvc_codec_info_t *ci, size_t n, size_t T,
                             cli_chart_row_t **rows)
{
    const size_t L = ci[0].planes * ci[0].num_layers;
    cli_chart_row_t *r = calloc(L, sizeof(*r));
    kvc_codec_layer_stats_t *ls = calloc(L, sizeof(*ls));
    if (!r || !ls) {
        free(r);
        free(ls);
        return cli_fail("inspect", KVC_ERR_NO_MEMORY);
    }
    for (size_t i = 0, off = 0; i < n; off += ci[i].container_bytes, i++) {
        const kvc_status_t st = kvc_codec_layer_stats(buf + off, ci[i].container_bytes, ls, L);
        if (st != KVC_OK) {
            fprintf(stderr, "kvcore inspect: %s: %s: chunk %zu: %s\n", kvc_status_string(st), label, i, kvc_last_error());
            free(r);
            free(ls);
            return CLI_EXIT_ERROR;
        }
        for (size_t l = 0; l < L; l++) {
            r[l] = (cli_chart_row_t){ ls[l].plane ? "V" : (ci[0].planes == 2 ? "K" : "latent"), ls[l].layer,
                                      r[l].bits + ls[l].bits_per_symbol * (double)ci[i].num_tokens / (double)T, 0 };
        }
    }
    free(ls);
    *rows = r;
    return 0;
}

static int inspect_stream(const char *in_path, const char *label, const uint8_t *buf, size_t len, int as_json, int quiet,
                          int chart, const char *svg)
{
    const stream_src_t src = { .fd = -1, .data = buf, .size = len };
    stream_walk_t walk;
    if (!stream_tokens(&src, &walk) && walk.stop < len) return stream_stopped("inspect", label, &walk, len);
    const size_t n = walk.chunks;
    kvc_codec_info_t *ci = calloc(n, sizeof(*ci));
    if (!ci) return cli_fail("inspect", KVC_ERR_NO_MEMORY);
    size_t off = 0, T = 0, orig = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t total = container_at(buf + off, len - off);
        kvc_status_t st = kvc_codec_inspect(buf + off, total, &ci[i]);
        if (st != KVC_OK) {
            fprintf(stderr, "kvcore inspect: %s: %s: chunk %zu (bytes %zu to %zu): %s\n", kvc_status_string(st), label, i,
                    off, off + total, kvc_last_error());
            free(ci);
            return CLI_EXIT_ERROR;
        }
        if (ci[i].dtype != ci[0].dtype || ci[i].layout != ci[0].layout || ci[i].num_layers != ci[0].num_layers ||
            ci[i].num_heads != ci[0].num_heads || ci[i].head_size != ci[0].head_size) {
            fprintf(stderr, "kvcore inspect: %s: %s: chunk %zu is not of the first chunk's kind (%s, %zu layers, %zu "
                            "channels): not one stream\n", kvc_status_string(KVC_ERR_CORRUPT), label, i,
                    kvc_dtype_name(ci[0].dtype), ci[0].num_layers, ci[0].num_heads * ci[0].head_size);
            free(ci);
            return CLI_EXIT_ERROR;
        }
        off += total;
        T += ci[i].num_tokens;
        orig += ci[i].original_bytes;
    }
    const kvc_codec_info_t *c0 = &ci[0];
    const size_t es = kvc_dtype_size(c0->dtype);
    const double fp16 = (double)orig / (double)es * 2.0;
    const int draw = !as_json && !quiet && cli_chart_wanted(chart);
    cli_chart_row_t *rows = NULL;
    const size_t L = c0->planes * c0->num_layers;
    int rc = (draw || svg) ? stream_layer_rows(label, buf, ci, n, T, &rows) : 0;
    if (!rc && svg) {
        char title[256];
        snprintf(title, sizeof(title), "%s: bits/symbol per layer (%zu chunks)", label, n);
        rc = cli_chart_svg("inspect", svg, title, rows, L, 0);
        if (!rc && !strcmp(svg, "-")) rc = -1; /* the image instead of the report */
    }
    if (rc) {
        free(rows);
        free(ci);
        return rc < 0 ? 0 : rc;
    }
    if (as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "file", in_path);
        json_bool(&w, "stream", 1);
        json_int(&w, "chunks", (long long)n);
        kvc_codec_info_t all = *c0;
        all.num_tokens = T;
        json_chunk_shape(&w, &all);
        json_begin_object(&w, "bytes");
        json_int(&w, "stream", (long long)len);
        json_int(&w, "original", (long long)orig);
        json_end_object(&w);
        json_double(&w, "ratio_vs_fp16", fp16 / (double)len);
        json_begin_array(&w, "chunks_stats");
        size_t t0 = 0;
        for (size_t i = 0; i < n; i++) {
            json_begin_object(&w, NULL);
            json_int(&w, "chunk", (long long)i);
            json_int(&w, "first_token", (long long)t0);
            json_int(&w, "tokens", (long long)ci[i].num_tokens);
            json_int(&w, "bytes", (long long)ci[i].container_bytes);
            json_int(&w, "original_bytes", (long long)ci[i].original_bytes);
            json_double(&w, "bits_per_symbol", 8.0 * (double)ci[i].streams_bytes * (double)es / (double)ci[i].original_bytes);
            json_bool(&w, "lmcache_readable", ci[i].lmcache_readable);
            json_end_object(&w);
            t0 += ci[i].num_tokens;
        }
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    } else {
        char heads[64] = "channels (head split unknown)";
        if (c0->heads_known) snprintf(heads, sizeof(heads), "heads x %zu", c0->head_size);
        printf("%s: kvcore stream of %zu containers v%u.%u, %s %s, %zu layers x %zu tokens x %zu %s, coder %s\n", label, n,
               c0->version_major, c0->version_minor, layout_name(c0), kvc_dtype_name(c0->dtype), c0->num_layers, T,
               c0->heads_known ? c0->num_heads : c0->num_heads * c0->head_size, heads, coder_name(c0));
        if (!quiet) {
            printf("\n%-6s %-15s %12s %12s %8s %9s\n", "chunk", "tokens", "bytes", "original", "ratio", "bits/sym");
            size_t t0 = 0;
            for (size_t i = 0; i < n; i++) {
                char tok[40];
                snprintf(tok, sizeof(tok), "%zu-%zu", t0, t0 + ci[i].num_tokens - 1);
                printf("%-6zu %-15s %12zu %12zu %7.2fx %9.4f\n", i, tok, ci[i].container_bytes, ci[i].original_bytes,
                       (double)ci[i].original_bytes / (double)es * 2.0 / (double)ci[i].container_bytes,
                       8.0 * (double)ci[i].streams_bytes * (double)es / (double)ci[i].original_bytes);
                t0 += ci[i].num_tokens;
            }
            printf("%-6s %-15zu %12zu %12zu %7.2fx\n", "total", T, len, orig, fp16 / (double)len);
        }
        if (draw) {
            printf("\nper layer, over the %zu chunks:\n", n);
            cli_chart_print(stdout, rows, L, 0);
        }
    }
    free(rows);
    free(ci);
    return 0;
}

int kvc_cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        { "original", required_argument, NULL, 'O' },
        { "json", no_argument, NULL, 'J' },
        { "lmcache-config", no_argument, NULL, OPT_LMCACHE_CONFIG },
        { "chart", no_argument, NULL, OPT_CHART },
        { "no-chart", no_argument, NULL, OPT_NO_CHART },
        { "svg", required_argument, NULL, OPT_SVG },
        { "force", no_argument, NULL, 'f' },
        { NULL, 0, NULL, 0 },
    };
    const char *orig[2] = { NULL, NULL }, *svg = NULL;
    int norig = 0, as_json = 0, lmcfg = 0, chart = -1, force = 0, c;
    cli_common_t com = { 0 };
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT "f", longopts, NULL)) != -1) {
        switch (c) {
        case 'J': as_json = 1; break;
        case OPT_LMCACHE_CONFIG: lmcfg = 1; break;
        case OPT_CHART: chart = 1; break;
        case OPT_NO_CHART: chart = 0; break;
        case OPT_SVG: svg = optarg; break;
        case 'f': force = 1; break;
        case 'O':
            if (norig == 2) {
                fprintf(stderr, "kvcore inspect: --original is a KV file or a K file and a V file (at most twice)\n");
                return CLI_EXIT_USAGE;
            }
            orig[norig++] = optarg;
            break;
        default: {
            int r = cli_common_option("inspect", c, argv, &com, inspect_help);
            if (r >= 0) return r;
        }
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "kvcore inspect: need one IN.kvc (see kvcore inspect --help)\n");
        return CLI_EXIT_USAGE;
    }
    const char *in_path = argv[optind];
    if ((norig == 2 && count_stdin(orig, 2)) || (norig && !strcmp(in_path, "-") && count_stdin(orig, norig))) {
        fprintf(stderr, "kvcore inspect: standard input (-) can be read once, and holds a KV file, not one of a K/V pair\n");
        return CLI_EXIT_USAGE;
    }
    if ((chart == 1 || svg) && lmcfg) {
        fprintf(stderr, "kvcore inspect: %s draws the per-layer report, not --lmcache-config\n", svg ? "--svg" : "--chart");
        return CLI_EXIT_USAGE;
    }
    if (chart == 1 && as_json) {
        fprintf(stderr, "kvcore inspect: --chart draws on the text report, not with --json (--svg FILE writes it as an image)\n");
        return CLI_EXIT_USAGE;
    }
    if (svg && !strcmp(svg, "-") && (as_json || chart == 1)) {
        fprintf(stderr, "kvcore inspect: --svg - writes the image to standard output instead of the report: not with %s\n",
                as_json ? "--json" : "--chart");
        return CLI_EXIT_USAGE;
    }
    if (svg) {
        const char *inputs[3] = { in_path, orig[0], orig[1] };
        int rc = cli_chart_svg_check("inspect", svg, force, inputs, 1 + norig);
        if (rc) return rc;
    }
    /* the chart goes after the text report: not with --json, -q or --svg - unless asked */
    if (chart < 0 && (as_json || com.quiet || (svg && !strcmp(svg, "-")))) chart = 0;
    cli_input_t in;
    int rc = cli_input_open("inspect", in_path, 1, &in);
    if (rc || (rc = cli_input_load("inspect", &in)) != 0) {
        cli_input_close(&in);
        return rc;
    }
    const uint8_t *buf = in.data;
    const size_t len = in.len;
    if (cli_kvc_is_stream(buf, len)) {
        if (norig) {
            fprintf(stderr, "kvcore inspect: --original compares one container; %s is a stream: decode it and compare "
                            "the .npy files\n", in.label);
            rc = CLI_EXIT_USAGE;
        } else rc = inspect_stream(in_path, in.label, buf, len, as_json, com.quiet, chart, svg);
        cli_input_close(&in);
        return rc;
    }
    kvc_codec_info_t info;
    kvc_status_t st = kvc_codec_inspect(buf, len, &info);
    if (st != KVC_OK) {
        cli_input_close(&in);
        return cli_fail("inspect", st);
    }
    if (lmcfg) {
        kvc_tensor_t kv = { 0 };
        if (!norig || (rc = load_original(orig, norig, &info, &kv)) == 0)
            rc = cli_lmcache_config(stdout, in.label, buf, len, &info, norig ? kv.data : NULL);
        if (norig && kv.data) kvc_tensor_free(&kv);
        cli_input_close(&in);
        return rc;
    }
    const size_t L = info.planes * info.num_layers, per_layer = info.num_tokens * info.num_heads * info.head_size;
    kvc_codec_layer_stats_t *ls = calloc(L, sizeof(*ls));
    cli_err_t *err = calloc(L, sizeof(*err));
    cli_chart_row_t *rows = NULL;
    int have_err = 0;
    if (!ls || !err || (st = kvc_codec_layer_stats(buf, len, ls, L)) != KVC_OK) {
        rc = cli_fail("inspect", ls && err ? st : KVC_ERR_NO_MEMORY);
        goto done;
    }
    if (norig) {
        kvc_tensor_t kv, dec;
        if ((rc = load_original(orig, norig, &info, &kv)) != 0) goto done;
        kvc_context_t *ctx = open_context("inspect");
        if (!ctx) rc = CLI_EXIT_ERROR;
        else if ((st = kvc_codec_decode_alloc(ctx, buf, len, &dec)) == KVC_OK) {
            cli_error_stats(kv.data, dec.data, info.dtype, L, per_layer, err);
            have_err = 1;
            kvc_tensor_free(&dec);
        } else rc = cli_fail("inspect", st);
        kvc_tensor_free(&kv);
        kvc_context_destroy(ctx);
        if (rc) goto done;
    }
    const double fp16_bytes = (double)info.original_bytes / (double)kvc_dtype_size(info.dtype) * 2.0;
    const double q8_bytes = (double)info.original_bytes / (double)kvc_dtype_size(info.dtype) + (double)info.scales_bytes;
    rows = calloc(L, sizeof(*rows));
    if (!rows) {
        rc = cli_fail("inspect", KVC_ERR_NO_MEMORY);
        goto done;
    }
    for (size_t l = 0; l < L; l++)
        rows[l] = (cli_chart_row_t){ ls[l].plane ? "V" : (info.planes == 2 ? "K" : "latent"), ls[l].layer,
                                     ls[l].bits_per_symbol, have_err ? err[l].rel_rms : 0 };
    if (svg) {
        char title[256];
        snprintf(title, sizeof(title), "%s: bits/symbol%s per layer", in.label, have_err ? " and relative RMS error" : "");
        if ((rc = cli_chart_svg("inspect", svg, title, rows, L, have_err)) != 0 || !strcmp(svg, "-")) goto done;
    }
    if (as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "file", in_path);
        json_int(&w, "format_version_major", info.version_major);
        json_int(&w, "format_version_minor", info.version_minor);
        json_chunk_shape(&w, &info);
        json_int(&w, "window_tokens", info.window_tokens);
        json_int(&w, "cdf_bins", info.cdf_bins);
        json_bool(&w, "raw_cdf", info.raw_cdf);
        json_string(&w, "key_scaling", info.key_scaling == KVC_CODEC_SCALE_CHANNEL ? "channel" : "token");
        json_bool(&w, "lmcache_readable", info.lmcache_readable);
        json_begin_object(&w, "bytes");
        json_int(&w, "container", (long long)info.container_bytes);
        json_int(&w, "original", (long long)info.original_bytes);
        json_int(&w, "streams", (long long)info.streams_bytes);
        json_int(&w, "cdf", (long long)info.cdf_bytes);
        json_int(&w, "scales", (long long)info.scales_bytes);
        json_int(&w, "lengths", (long long)info.lengths_bytes);
        json_int(&w, "lmcache_layout", (long long)info.lmcache_bytes);
        json_end_object(&w);
        json_double(&w, "ratio_vs_fp16", fp16_bytes / (double)info.container_bytes);
        json_double(&w, "ratio_vs_int8", q8_bytes / (double)info.container_bytes);
        json_begin_array(&w, "layers_stats");
        for (size_t l = 0; l < L; l++) {
            json_begin_object(&w, NULL);
            json_string(&w, "plane", ls[l].plane ? "V" : (info.planes == 2 ? "K" : "latent"));
            json_int(&w, "layer", ls[l].layer);
            json_int(&w, "bins", ls[l].bins);
            json_double(&w, "bits_per_symbol", ls[l].bits_per_symbol);
            json_double(&w, "entropy_bits", ls[l].entropy_bits);
            if (have_err) {
                json_double(&w, "max_abs_error", err[l].max_abs);
                json_double(&w, "relative_rms_error", err[l].rel_rms);
            }
            json_end_object(&w);
        }
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    } else {
        char heads[64] = "channels (head split unknown)";
        if (info.heads_known) snprintf(heads, sizeof(heads), "heads x %zu", info.head_size);
        printf("%s: kvcore container v%u.%u, %s %s, %zu layers x %zu tokens x %zu %s, window %u, CDF %u bins%s, coder %s\n",
               in.label, info.version_major, info.version_minor, layout_name(&info), kvc_dtype_name(info.dtype), info.num_layers,
               info.num_tokens, info.heads_known ? info.num_heads : info.num_heads * info.head_size, heads,
               info.window_tokens, info.cdf_bins, info.raw_cdf ? " (raw LMCache table)" : "", coder_name(&info));
        if (com.quiet) goto done;
        printf("size: %zu bytes = streams %zu + CDF %zu + scales %zu + lengths %zu + header %zu\n", info.container_bytes,
               info.streams_bytes, info.cdf_bytes, info.scales_bytes, info.lengths_bytes,
               info.container_bytes - info.streams_bytes - info.cdf_bytes - info.scales_bytes - info.lengths_bytes);
        if (info.coder == KVC_CODER_RANS) /* LMCache has no layout for rANS streams */
            printf("ratio: %.2fx vs fp16, %.2fx vs 8-bit quantisation\n", fp16_bytes / (double)info.container_bytes,
                   q8_bytes / (double)info.container_bytes);
        else
            printf("ratio: %.2fx vs fp16, %.2fx vs 8-bit quantisation; LMCache's layout of the same streams: %zu bytes (%.1f%% larger)\n",
                   fp16_bytes / (double)info.container_bytes, q8_bytes / (double)info.container_bytes, info.lmcache_bytes,
                   100.0 * ((double)info.lmcache_bytes / (double)info.container_bytes - 1.0));
        printf("\n%-6s %-5s %4s %10s %10s %9s%s\n", "plane", "layer", "bins", "bits/sym", "entropy", "overhead",
               have_err ? "    max|err|   rel.RMS" : "");
        for (size_t l = 0; l < L; l++) {
            printf("%-6s %-5u %4u %10.4f %10.4f %8.2f%%", ls[l].plane ? "V" : (info.planes == 2 ? "K" : "latent"), ls[l].layer,
                   ls[l].bins, ls[l].bits_per_symbol, ls[l].entropy_bits,
                   100.0 * (ls[l].bits_per_symbol / ls[l].entropy_bits - 1.0));
            if (have_err) printf("  %10.4g %9.4f", err[l].max_abs, err[l].rel_rms);
            printf("\n");
        }
        if (cli_chart_wanted(chart)) {
            printf("\n");
            cli_chart_print(stdout, rows, L, have_err);
        }
    }
done:
    free(rows);
    free(ls);
    free(err);
    cli_input_close(&in);
    return rc;
}
