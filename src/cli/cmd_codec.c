/* kvcore encode / decode / inspect: CacheGen-compress KV caches stored as .npy / .safetensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

#include "cli.h"
#include "json.h"
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

/* The chunk a container holds, as JSON fields (decode and inspect). */
static void json_chunk_shape(json_writer_t *w, const kvc_codec_info_t *info)
{
    json_string(w, "dtype", kvc_dtype_name(info->dtype));
    json_string(w, "layout", info->layout == KVC_CODEC_MLA ? "MLA" : "KV_2LTD");
    json_int(w, "layers", (long long)info->num_layers);
    json_int(w, "tokens", (long long)info->num_tokens);
    json_int(w, "heads", (long long)info->num_heads);
    json_int(w, "head_size", (long long)info->head_size);
}

/* ---- encode's quality options (--level, --bins-k, --bins-v, --key-scaling) ---------------------
 * Parsed after the main options; applied once the file's layer count is known. */
typedef struct {
    int level;                  /* -1: none */
    const char *bins[2];        /* K, V: "N" or a per-layer list "N,N,..." */
    int key_scaling;            /* -1: default */
} quality_opts_t;

/* Consumes argv[*i] (and its value) when it is a quality option: 1 consumed, 0 not ours, -1 bad. */
static int quality_option(int argc, char **argv, int *i, quality_opts_t *q)
{
    const char *o = argv[*i];
    if (*i + 1 >= argc) return 0;
    if (!strcmp(o, "--level")) {
        char *end;
        const long v = strtol(argv[++*i], &end, 10);
        if (*end || v < 0 || v > KVC_CODEC_LEVEL_MAX) {
            fprintf(stderr, "kvcore encode: --level %s: expected 0 .. %d\n", argv[*i], KVC_CODEC_LEVEL_MAX);
            return -1;
        }
        q->level = (int)v;
    } else if (!strcmp(o, "--bins-k") || !strcmp(o, "--bins-v")) q->bins[o[7] == 'v'] = argv[++*i];
    else if (!strcmp(o, "--key-scaling")) {
        const char *v = argv[++*i];
        if (strcmp(v, "token") && strcmp(v, "channel")) {
            fprintf(stderr, "kvcore encode: --key-scaling %s: expected token or channel\n", v);
            return -1;
        }
        q->key_scaling = !strcmp(v, "channel");
    } else return 0;
    return 1;
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

int kvc_cmd_encode(int argc, char **argv)
{
    const char *in[2] = { NULL, NULL }, *out = NULL;
    int nin = 0, quiet = 0, as_json = 0;
    kvc_kvcache_io_params_t io = { 0 };
    kvc_codec_params_t p = { 0 };
    quality_opts_t qo = { .level = -1, .key_scaling = -1 };
    for (int i = 1; i < argc; i++) {
        const int qr = quality_option(argc, argv, &i, &qo);
        if (qr < 0) return 2;
        if (qr) continue;
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--heads") && i + 1 < argc) {
            if (!cli_parse_size("encode", "--heads", argv[++i], &io.num_heads)) return 2;
            io.field_mask |= KVC_KVCACHE_PARAM_NUM_HEADS;
        } else if (!strcmp(argv[i], "--head-size") && i + 1 < argc) {
            if (!cli_parse_size("encode", "--head-size", argv[++i], &io.head_size)) return 2;
            io.field_mask |= KVC_KVCACHE_PARAM_HEAD_SIZE;
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc) {
            size_t w;
            if (!cli_parse_size("encode", "--window", argv[++i], &w) || w > UINT32_MAX) return 2;
            p.window_tokens = (uint32_t)w;
            p.field_mask |= KVC_CODEC_PARAM_WINDOW;
        } else if (!strcmp(argv[i], "-q")) quiet = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: kvcore encode KV_FILE|K_FILE V_FILE -o OUT.kvc [--heads N] [--head-size N] [--window T] [-q] [--json]\n"
                   "  KV_FILE: .npy or .safetensors with [2, NL, T, NH*HS] (or \"k\"/\"v\" tensors [NL, T, NH, HS]);\n"
                   "  K_FILE V_FILE: two files of [NL, T, NH, HS]. f16, bf16 or f32.\n"
                   "  --json: one JSON object on stdout (shape, sizes, ratio, seconds) instead of the summary line\n"
                   "quality (docs/CACHEGEN.md): [--level 0-%d] [--bins-k B|B,B,..] [--bins-v B|B,B,..] [--key-scaling token|channel]\n"
                   "  --level: a named profile (0 = LMCache's default; higher = smaller); --bins-k/-v override its bins,\n"
                   "  one even count in [4, 64] for every layer or one per layer; --key-scaling channel: per-channel key\n"
                   "  scales (format 1.1). Containers LMCache cannot read are written with a warning.\n",
                   KVC_CODEC_LEVEL_MAX);
            return 0;
        } else if (argv[i][0] == '-' || nin == 2) {
            fprintf(stderr, "kvcore encode: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else in[nin++] = argv[i];
    }
    if (!nin || !out) {
        fprintf(stderr, "kvcore encode: need an input file and -o OUT.kvc (see --help)\n");
        return 2;
    }
    kvc_tensor_t kv;
    kvc_kvcache_dims_t dims;
    kvc_status_t st = nin == 2 ? kvc_kvcache_load_pair(in[0], in[1], &io, &kv, &dims) : kvc_kvcache_load(in[0], &io, &kv, &dims);
    if (st != KVC_OK) return cli_fail("encode", st);
    kvc_context_t *ctx = open_context("encode");
    if (!ctx) {
        kvc_tensor_free(&kv);
        return 1;
    }
    p.dtype = kv.dtype;
    p.layout = KVC_CODEC_KV_2LTD;
    p.num_layers = dims.num_layers;
    p.num_tokens = dims.num_tokens;
    /* Without NH/HS the channels are still exact: the codec only needs NH*HS. */
    p.num_heads = dims.num_heads ? dims.num_heads : 1;
    p.head_size = dims.num_heads ? dims.head_size : dims.hidden;
    uint32_t *qbins = malloc(2 * p.num_layers * sizeof(uint32_t));
    int qrc = qbins ? quality_apply(&qo, &p, qbins) : cli_fail("encode", KVC_ERR_NO_MEMORY);
    if (qrc) {
        free(qbins);
        kvc_tensor_free(&kv);
        kvc_context_destroy(ctx);
        return qrc;
    }
    p.field_mask |= KVC_CODEC_PARAM_PROGRESS;
    p.progress = cli_progress;
    p.progress_user = (void *)"encode";
    if (as_json) p.field_mask &= ~(uint64_t)KVC_CODEC_PARAM_PROGRESS;
    uint8_t *buf = NULL;
    size_t len = 0;
    const double t0 = cli_now();
    st = kvc_codec_encode(ctx, &p, kv.data, &buf, &len);
    const double dt = cli_now() - t0;
    int rc = 0;
    free(qbins);
    if (st == KVC_OK) warn_if_lmcache_unreadable(out, buf, len);
    if (st != KVC_OK) rc = cli_fail("encode", st);
    else if ((rc = cli_write_file(out, buf, len)) == 0 && as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "output", out);
        json_string(&w, "dtype", kvc_dtype_name(kv.dtype));
        json_int(&w, "layers", (long long)p.num_layers);
        json_int(&w, "tokens", (long long)p.num_tokens);
        json_int(&w, "channels", (long long)(p.num_heads * p.head_size));
        json_int(&w, "input_bytes", (long long)kv.nbytes);
        json_int(&w, "output_bytes", (long long)len);
        json_double(&w, "ratio", (double)kv.nbytes / (double)len);
        json_double(&w, "seconds", dt);
        json_double(&w, "gb_per_s", (double)kv.nbytes / dt / 1e9);
        json_end_object(&w);
        json_finish(&w);
    } else if (rc == 0 && !quiet)
        printf("%s: %zu layers x %zu tokens x %zu channels (%s), %zu -> %zu bytes (%.2fx) in %.3f s (%.2f GB/s)\n", out,
               p.num_layers, p.num_tokens, p.num_heads * p.head_size, kvc_dtype_name(kv.dtype), kv.nbytes, len,
               (double)kv.nbytes / (double)len, dt, (double)kv.nbytes / dt / 1e9);
    kvc_codec_free(buf);
    kvc_tensor_free(&kv);
    kvc_context_destroy(ctx);
    return rc;
}

int kvc_cmd_decode(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    int split = 0, as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--split")) split = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: kvcore decode IN.kvc -o OUT.{npy,safetensors} [--split] [--json]\n"
                   "  writes [2, NL, T, NH*HS]; --split writes \"k\" and \"v\" [NL, T, NH, HS] (safetensors)\n"
                   "  --json: one JSON object on stdout (shape, sizes, seconds)\n");
            return 0;
        } else if (argv[i][0] == '-' || in) {
            fprintf(stderr, "kvcore decode: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else in = argv[i];
    }
    if (!in || !out) {
        fprintf(stderr, "kvcore decode: need IN.kvc and -o OUT (see --help)\n");
        return 2;
    }
    size_t len;
    uint8_t *buf = cli_read_file(in, &len);
    if (!buf) return 1;
    kvc_context_t *ctx = open_context("decode");
    if (!ctx) {
        free(buf);
        return 1;
    }
    kvc_tensor_t kv;
    kvc_codec_info_t info;
    int rc = 0;
    const double t0 = cli_now();
    kvc_status_t st = kvc_codec_inspect(buf, len, &info);
    if (st == KVC_OK) st = kvc_codec_decode_alloc(ctx, buf, len, &kv);
    const double dt = cli_now() - t0;
    if (st != KVC_OK) rc = cli_fail("decode", st);
    else {
        kvc_kvcache_io_params_t io = { .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS | KVC_KVCACHE_PARAM_HEAD_SIZE |
                                                     KVC_KVCACHE_PARAM_FORM,
                                       .num_heads = info.num_heads,
                                       .head_size = info.head_size,
                                       .form = split ? KVC_KVCACHE_SPLIT : KVC_KVCACHE_FUSED };
        if (info.layout == KVC_CODEC_MLA) {
            st = kvc_npy_write(out, &kv); /* [NL, T, HS] */
        } else {
            st = kvc_kvcache_save(out, &kv, &io);
        }
        if (st != KVC_OK) rc = cli_fail("decode", st);
        else if (as_json) {
            json_writer_t w;
            json_init(&w, stdout, 1);
            json_begin_object(&w, NULL);
            json_string(&w, "input", in);
            json_string(&w, "output", out);
            json_chunk_shape(&w, &info);
            json_int(&w, "input_bytes", (long long)len);
            json_int(&w, "output_bytes", (long long)kv.nbytes);
            json_double(&w, "decode_seconds", dt);
            json_double(&w, "gb_per_s", (double)kv.nbytes / dt / 1e9);
            json_end_object(&w);
            json_finish(&w);
        }
        kvc_tensor_free(&kv);
    }
    kvc_context_destroy(ctx);
    free(buf);
    return rc;
}

int kvc_cmd_inspect(int argc, char **argv)
{
    const char *in = NULL, *orig = NULL;
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--original") && i + 1 < argc) orig = argv[++i];
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: kvcore inspect IN.kvc [--original KV_FILE] [--json]\n"
                   "  header, sizes and ratios, coded bits/symbol vs entropy per layer; with --original also the\n"
                   "  reconstruction error per layer\n");
            return 0;
        } else if (argv[i][0] == '-' || in) {
            fprintf(stderr, "kvcore inspect: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else in = argv[i];
    }
    if (!in) {
        fprintf(stderr, "kvcore inspect: need IN.kvc (see --help)\n");
        return 2;
    }
    size_t len;
    uint8_t *buf = cli_read_file(in, &len);
    if (!buf) return 1;
    kvc_codec_info_t info;
    kvc_status_t st = kvc_codec_inspect(buf, len, &info);
    if (st != KVC_OK) {
        free(buf);
        return cli_fail("inspect", st);
    }
    const size_t L = info.planes * info.num_layers, per_layer = info.num_tokens * info.num_heads * info.head_size;
    kvc_codec_layer_stats_t *ls = calloc(L, sizeof(*ls));
    cli_err_t *err = calloc(L, sizeof(*err));
    int rc = 0, have_err = 0;
    if (!ls || !err || (st = kvc_codec_layer_stats(buf, len, ls, L)) != KVC_OK) {
        rc = cli_fail("inspect", ls && err ? st : KVC_ERR_NO_MEMORY);
        goto done;
    }
    if (orig) {
        kvc_tensor_t kv, dec;
        kvc_kvcache_io_params_t io = { .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = info.num_heads };
        kvc_context_t *ctx = open_context("inspect");
        if (!ctx) { rc = 1; goto done; }
        st = kvc_kvcache_load(orig, &io, &kv, NULL);
        if (st == KVC_OK) {
            if (kv.nbytes != info.original_bytes || kv.dtype != info.dtype) {
                fprintf(stderr, "kvcore inspect: %s does not match the container (%s, %zu bytes vs %s, %zu bytes)\n", orig,
                        kvc_dtype_name(kv.dtype), kv.nbytes, kvc_dtype_name(info.dtype), info.original_bytes);
                rc = 1;
            } else if ((st = kvc_codec_decode_alloc(ctx, buf, len, &dec)) == KVC_OK) {
                cli_error_stats(kv.data, dec.data, info.dtype, L, per_layer, err);
                have_err = 1;
                kvc_tensor_free(&dec);
            }
            kvc_tensor_free(&kv);
        }
        kvc_context_destroy(ctx);
        if (st != KVC_OK) { rc = cli_fail("inspect", st); goto done; }
        if (rc) goto done;
    }
    const double fp16_bytes = (double)info.original_bytes / (double)kvc_dtype_size(info.dtype) * 2.0;
    const double q8_bytes = (double)info.original_bytes / (double)kvc_dtype_size(info.dtype) + (double)info.scales_bytes;
    if (as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "file", in);
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
        printf("%s: kvcore container v%u.%u, %s %s, %zu layers x %zu tokens x %zu heads x %zu, window %u, CDF %u bins%s\n", in,
               info.version_major, info.version_minor, info.layout == KVC_CODEC_MLA ? "MLA" : "KV_2LTD",
               kvc_dtype_name(info.dtype), info.num_layers, info.num_tokens, info.num_heads, info.head_size,
               info.window_tokens, info.cdf_bins, info.raw_cdf ? " (raw LMCache table)" : "");
        printf("size: %zu bytes = streams %zu + CDF %zu + scales %zu + lengths %zu + header %zu\n", info.container_bytes,
               info.streams_bytes, info.cdf_bytes, info.scales_bytes, info.lengths_bytes,
               info.container_bytes - info.streams_bytes - info.cdf_bytes - info.scales_bytes - info.lengths_bytes);
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
    }
done:
    free(ls);
    free(err);
    free(buf);
    return rc;
}
